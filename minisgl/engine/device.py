"""This rank's device, and a batch's way to it and back (chapters 02 and 10): `bind_device`,
`to_device` (one packed copy, with no host-device sync on CUDA) and `TokenFuture`, the greedy
tokens of a step still running on the device.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from minisgl.config import EngineConfig
from minisgl.core import Batch


def bind_device(config: EngineConfig) -> torch.device:
    """This rank's GPU (several ranks may share one, gloo only: local rank r -> GPU r mod count), or
    the CPU with this rank's share of the threads."""
    if config.device == "cuda":
        device = torch.device(f"cuda:{config.local_rank % torch.cuda.device_count()}")
        torch.cuda.set_device(device)
        return device
    torch.set_num_threads(config.rank_cpu_threads)
    return torch.device("cpu")


def to_device(batch: Batch, device: torch.device) -> Batch:
    """`batch` with its tensors on `device`, in one packed copy: [ids | positions | out slots | last indices]."""
    if batch.input_ids.device == device:
        return batch
    parts = [batch.input_ids, batch.positions, batch.out_slots, batch.last_indices]
    packed = torch.cat(parts)
    if device.type == "cuda":
        packed = packed.pin_memory().to(device, non_blocking=True)
    else:
        packed = packed.to(device)
    ids, positions, slots, last = packed.split([p.numel() for p in parts])
    return dataclasses.replace(batch, input_ids=ids, positions=positions, out_slots=slots, last_indices=last)


@dataclass
class TokenFuture:
    """Greedy tokens of a step still running on the device; `tokens()` waits for them."""

    host: torch.Tensor  # [num_reqs] int64 (pinned on CUDA), filled by an async copy
    event: torch.cuda.Event | None  # recorded after the copy; None on a CPU

    @classmethod
    def of(cls, tokens: torch.Tensor) -> TokenFuture:
        """Start copying `tokens` to the host without waiting for the device."""
        if tokens.device.type != "cuda":
            return cls(tokens, None)
        host = torch.empty(tokens.shape, dtype=tokens.dtype, pin_memory=True)
        host.copy_(tokens, non_blocking=True)
        event = torch.cuda.Event()
        event.record()
        return cls(host, event)

    def tokens(self) -> list[int]:
        if self.event is not None:
            self.event.synchronize()
        return self.host.tolist()
