"""The all-reduce / all-gather seam: layers call two functions, a plugin list decides who runs them.

`DistributedCommunicator.plugins` is a list whose last entry wins, as in mini-SGLang: the engine
appends `TorchDistributedImpl` (gloo or NCCL under torch.distributed) and, on GPUs, may append
PyNCCL on top. Layers never learn which one runs (chapter 03). Every call is also counted, so
chapter 07 can show the 2 * layers + 1 all-reduces and 1 all-gather of one forward; with the
communication counter on (`counter.py`), their bytes and times too.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Protocol

import torch
import torch.distributed as dist

from .counter import COMM_COUNTER
from .info import get_tp_info

if TYPE_CHECKING:
    from minisgl.kernel.pynccl import PyNCCLCommunicator


class DistributedImpl(Protocol):
    """One way of running collectives over the TP group."""

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


class PyNCCLDistributedImpl:
    """Collectives through our ctypes NCCL communicator (`minisgl.kernel.pynccl`): enqueued on the
    current CUDA stream, so CUDA graphs capture them."""

    def __init__(self, comm: PyNCCLCommunicator) -> None:
        self.comm = comm

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        return self.comm.all_reduce(x)

    def all_gather(self, x: torch.Tensor) -> torch.Tensor:
        return self.comm.all_gather(x)

    def close(self) -> None:
        self.comm.close()


class DistributedCommunicator:
    """Routes collectives to the last registered plugin and counts them."""

    plugins: list[DistributedImpl] = []
    counts: Counter[str] = Counter()

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        self.counts["all_reduce"] += 1
        if get_tp_info().size == 1:
            return x
        # NCCL and PyNCCL refuse a strided tensor that gloo accepts: one rule for every backend.
        x, plugin = x.contiguous(), self._plugin("all_reduce")
        if COMM_COUNTER.enabled:
            return COMM_COUNTER.run("all_reduce", x, plugin.all_reduce)
        return plugin.all_reduce(x)

    def all_gather(self, x: torch.Tensor) -> torch.Tensor:
        self.counts["all_gather"] += 1
        if get_tp_info().size == 1:
            return x
        x, plugin = x.contiguous(), self._plugin("all_gather")
        if COMM_COUNTER.enabled:
            return COMM_COUNTER.run("all_gather", x, plugin.all_gather)
        return plugin.all_gather(x)

    def _plugin(self, op: str) -> DistributedImpl:
        if not self.plugins:
            raise RuntimeError(
                f"minisgl.distributed.{op} at tp size {get_tp_info().size} needs a process group, and this process "
                "has joined none: run it on real ranks (set_tp_info alone does not connect them)"
            )
        return self.plugins[-1]


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
    from minisgl.kernel.pynccl import PyNCCLCommunicator

    DistributedCommunicator.plugins.append(PyNCCLDistributedImpl(PyNCCLCommunicator(cpu_group, device)))


def collective_counts() -> dict[str, int]:
    """How many all-reduces and all-gathers passed through the seam since the last reset."""
    return {"all_reduce": _COMM.counts["all_reduce"], "all_gather": _COMM.counts["all_gather"]}


def reset_collective_counts() -> None:
    _COMM.counts.clear()


def destroy_distributed() -> None:
    """Drop every plugin and the pipeline links, then the torch.distributed group (graphs and
    plugins go first)."""
    from .pipeline import disable_pipeline  # pipeline.py builds on this module

    disable_pipeline()
    for plugin in reversed(DistributedCommunicator.plugins):
        if isinstance(plugin, PyNCCLDistributedImpl):
            plugin.close()
    DistributedCommunicator.plugins.clear()
    if dist.is_initialized():
        dist.destroy_process_group()
