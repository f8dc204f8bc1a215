"""Who this process is among the tensor-parallel ranks, and every collective a rank makes (chapters
02, 03 and 06). `DistributedInfo` is set before any layer is built: every TP layer reads it to size
its shard. The layers call `all_reduce` / `all_gather`, which run on the last of
`DistributedCommunicator.plugins` (as in mini-SGLang; `groups.join` registers them) and are counted
(chapter 07). The control plane, never counted: the few integers and bytes the ranks agree on over
the gloo CPU group (the KV size, rank 0's message count, the NCCL unique id, the precision).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import Any, Protocol

import torch
import torch.distributed as dist

from .counter import COMM_COUNTER


@dataclass(frozen=True)
class DistributedInfo:
    """Rank `rank` of a group of `size` processes (tensor-parallel, or the stages of a pipeline)."""

    rank: int
    size: int

    def __post_init__(self) -> None:
        if self.size < 1 or not 0 <= self.rank < self.size:
            raise ValueError(f"invalid DistributedInfo(rank={self.rank}, size={self.size})")

    @property
    def is_primary(self) -> bool:
        """Rank 0 is the only rank that talks to the tokenizer and detokenizer."""
        return self.rank == 0


_TP_INFO: DistributedInfo | None = None


def set_tp_info(rank: int, size: int) -> DistributedInfo:
    """Record this process's TP position. Call it before constructing any layer."""
    global _TP_INFO
    _TP_INFO = DistributedInfo(rank, size)
    return _TP_INFO


def get_tp_info() -> DistributedInfo:
    """This process's TP position; a single-process default of (0, 1) if none was set."""
    return _TP_INFO if _TP_INFO is not None else DistributedInfo(0, 1)


class DistributedImpl(Protocol):
    """One way of running collectives over the TP group (PyNCCL's communicator is one as it is)."""

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor: ...  # the sum over the ranks, on every rank (may reuse x)

    def all_gather(self, x: torch.Tensor) -> torch.Tensor: ...  # [n, ...] -> [size * n, ...], ranks in order


class TorchDistributedImpl:
    """Collectives through torch.distributed on a process group (gloo on CPU, NCCL on GPUs)."""

    def __init__(self, group: dist.ProcessGroup | None = None) -> None:
        self.group = group

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        dist.all_reduce(x, op=dist.ReduceOp.SUM, group=self.group)
        return x

    def all_gather(self, x: torch.Tensor) -> torch.Tensor:
        # The list form works on every backend; gloo has no all_gather_into_tensor.
        parts = [torch.empty_like(x) for _ in range(dist.get_world_size(self.group))]
        dist.all_gather(parts, x.contiguous(), group=self.group)
        return torch.cat(parts, dim=0)


class DistributedCommunicator:
    """Routes collectives to the last registered plugin and counts them."""

    plugins: list[DistributedImpl] = []
    counts: Counter[str] = Counter()

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        return self._run("all_reduce", x)

    def all_gather(self, x: torch.Tensor) -> torch.Tensor:
        return self._run("all_gather", x)

    def _run(self, op: str, x: torch.Tensor) -> torch.Tensor:
        self.counts[op] += 1
        if get_tp_info().size == 1:
            return x
        if not self.plugins:
            raise RuntimeError(f"minisgl.distributed.{op} at tp size {get_tp_info().size} needs a process group, and "
                               "this process has joined none: run it on real ranks (set_tp_info does not connect them)")
        # NCCL and PyNCCL refuse a strided tensor that gloo accepts: one rule for every backend.
        x, collective = x.contiguous(), getattr(self.plugins[-1], op)
        return COMM_COUNTER.run(op, x, collective) if COMM_COUNTER.enabled else collective(x)


_COMM = DistributedCommunicator()


def all_reduce(x: torch.Tensor) -> torch.Tensor:
    """Sum `x` across the TP group (identity at tp = 1)."""
    return _COMM.all_reduce(x)


def all_gather(x: torch.Tensor) -> torch.Tensor:
    """Concatenate `x` from every TP rank along dim 0 (identity at tp = 1)."""
    return _COMM.all_gather(x)


def enable_torch_distributed(group: dist.ProcessGroup | None = None) -> None:
    """Make torch.distributed on `group` the active collective implementation."""
    DistributedCommunicator.plugins.append(TorchDistributedImpl(group))


def collective_counts() -> dict[str, int]:
    """How many all-reduces and all-gathers passed through the seam since the last reset."""
    return {"all_reduce": _COMM.counts["all_reduce"], "all_gather": _COMM.counts["all_gather"]}


def reset_collective_counts() -> None:
    _COMM.counts.clear()


def min_over_ranks(value: int, group: dist.ProcessGroup) -> int:
    """The smallest `value` any rank of `group` passed, on every rank (the KV pages all can afford)."""
    tensor = torch.tensor([value], dtype=torch.int64)
    dist.all_reduce(tensor, op=dist.ReduceOp.MIN, group=group)
    return int(tensor.item())


def broadcast_count(count: int, group: dist.ProcessGroup) -> int:
    """Rank 0 of `group` sends `count`; every rank returns what rank 0 sent (chapter 06)."""
    tensor = torch.tensor([count], dtype=torch.int64)
    dist.broadcast(tensor, group=group, group_src=0)
    return int(tensor.item())


def broadcast_bytes(data: bytes, group: dist.ProcessGroup) -> bytes:
    """Rank 0's `data` (e.g. the NCCL unique id) on every rank of `group`, which pass buffers of its length."""
    tensor = torch.tensor(bytearray(data), dtype=torch.uint8)  # [len(data)]: a collective moves tensors
    dist.broadcast(tensor, group=group, group_src=0)
    return bytes(tensor.tolist())


def broadcast_json(value: Any, group: dist.ProcessGroup) -> Any:
    """Rank 0's `value` (anything JSON holds) on every rank of `group`: its length first, then its bytes."""
    data = json.dumps(value).encode()
    length = broadcast_count(len(data), group)
    return json.loads(broadcast_bytes(data.ljust(length)[:length], group))


def barrier(group: dist.ProcessGroup) -> None:
    """Return once every rank of `group` has called it."""
    dist.barrier(group=group)
