"""Who this process is among the tensor-parallel ranks, and the all-reduce / all-gather seam the
layers call (chapters 02 and 03): all a layer asks of `minisgl.distributed`.

`DistributedInfo` is set once per process, before any layer is built, because every TP layer reads
it in its constructor to decide how large its local shard is (chapter 02).

`DistributedCommunicator.plugins` is a list whose last entry wins, as in mini-SGLang: joining the
group (`groups.join`) appends `TorchDistributedImpl` (gloo or NCCL under torch.distributed) and, on
GPUs, may append PyNCCL on top. Layers never learn which one runs (chapter 03). Every call is also
counted, so chapter 07 can show the 2 * layers + 1 all-reduces and 1 all-gather of one forward; with
the communication counter on (`counter.py`), their bytes and times too.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Protocol

import torch
import torch.distributed as dist

from .counter import COMM_COUNTER
from .pynccl import PyNCCLCommunicator


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

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        """Sum `x` over all ranks; every rank gets the sum (may reuse `x`'s storage)."""
        ...

    def all_gather(self, x: torch.Tensor) -> torch.Tensor:
        """Concatenate every rank's `x` along dim 0 in rank order: [n, ...] -> [size * n, ...]."""
        ...


class TorchDistributedImpl:
    """Collectives through torch.distributed on a process group (gloo on CPU, NCCL on GPUs)."""

    def __init__(self, group: dist.ProcessGroup | None = None) -> None:
        self.group = group

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        dist.all_reduce(x, op=dist.ReduceOp.SUM, group=self.group)
        return x

    def all_gather(self, x: torch.Tensor) -> torch.Tensor:
        size = dist.get_world_size(self.group)
        # The list form works on every backend; gloo has no all_gather_into_tensor.
        parts = [torch.empty_like(x) for _ in range(size)]
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
        """Collective `op` of `x` over the TP group, counted, by the last plugin."""
        self.counts[op] += 1
        if get_tp_info().size == 1:
            return x
        if not self.plugins:
            raise RuntimeError(
                f"minisgl.distributed.{op} at tp size {get_tp_info().size} needs a process group, and this process "
                "has joined none: run it on real ranks (set_tp_info alone does not connect them)"
            )
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


def enable_pynccl(cpu_group: dist.ProcessGroup, device: torch.device) -> None:
    """Put PyNCCL on top of the plugin list; rank 0's NCCL unique id travels over `cpu_group`."""
    DistributedCommunicator.plugins.append(PyNCCLCommunicator(cpu_group, device))


def collective_counts() -> dict[str, int]:
    """How many all-reduces and all-gathers passed through the seam since the last reset."""
    return {"all_reduce": _COMM.counts["all_reduce"], "all_gather": _COMM.counts["all_gather"]}


def reset_collective_counts() -> None:
    _COMM.counts.clear()
