"""Joining the ranks' groups (chapters 03, 12 and 13): `join` makes every group a rank needs, in one
place, and `destroy_distributed` takes them down. The ranks meet at a store (`rendezvous.py`) and
form a gloo group for the control plane; then `join` registers who runs the tensor collectives
behind the seam (`impl.py`): gloo, torch's NCCL, our PyNCCL (`pynccl.py`), or the symmetric-memory
all-reduce over PyNCCL (`symm_mem.py`). Each pipeline stage is a TP group of its own, linked point
to point to its neighbours (`pipeline.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from .impl import DistributedCommunicator, DistributedInfo, enable_torch_distributed, set_tp_info
from .pipeline import disable_pipeline, link_stages
from .pynccl import PyNCCLCommunicator
from .rendezvous import rendezvous
from .symm_mem import enable_symm_mem, keep_multicast_off

DIST_BACKENDS = ("auto", "gloo", "nccl", "pynccl", "symm")


@dataclass(frozen=True)
class Groups:
    """What `join` made for this rank."""

    backend: str  # who runs the tensor collectives: "gloo", "nccl", "pynccl" or "symm"
    cpu: dist.ProcessGroup | None  # this TP group over gloo, for control bytes; None for a rank alone
    world: dist.ProcessGroup | None  # every rank of every stage, over gloo: what they all must agree on


def join(tp: DistributedInfo, init_addr: str, device: torch.device, backend: str = "auto", *,
         pp: DistributedInfo = DistributedInfo(0, 1), local_ranks: int | None = None, all_to_all: bool = False,
         timeout_s: float = 600.0) -> Groups:
    """Make rank `tp.rank` of pipeline stage `pp.rank` this process's place, and join its groups.
    The ranks meet at `init_addr`: a `file://` store on one machine, node 0's `tcp://` address across
    machines; none (""): a rank alone (tp = 1, one stage) joins no group, as nothing needs one.
    `local_ranks` (default: all of them) run on this machine, which tells whether each has a GPU of
    its own; `all_to_all`: the tensor collectives need one (expert parallelism, chapter 14)."""
    set_tp_info(tp.rank, tp.size)  # first: every layer constructor reads it
    world_size, rank = pp.size * tp.size, pp.rank * tp.size + tp.rank
    backend = resolve_dist_backend(backend, device, tp.size, local_ranks or world_size, all_to_all)
    if world_size == 1 and not init_addr:
        return Groups(backend, None, None)
    keep_multicast_off()  # before the first NCCL or symmetric-memory communicator (harmless on a CPU)
    timeout = timedelta(seconds=timeout_s)
    store = rendezvous(init_addr, rank, world_size, timeout)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size, timeout=timeout)
    world = dist.group.WORLD
    # each stage is a TP group: every rank creates every stage's groups, in the same order
    stages = [list(range(s * tp.size, (s + 1) * tp.size)) for s in range(pp.size)]
    cpu = world if pp.size == 1 else [dist.new_group(r, backend="gloo", timeout=timeout) for r in stages][pp.rank]
    if backend == "nccl":  # device_id: NCCL connects now, not inside the capture of a CUDA graph
        nccl = [dist.new_group(r, backend="nccl", timeout=timeout, device_id=device) for r in stages][pp.rank]
        enable_torch_distributed(nccl)
    else:  # gloo: CPU tensors, and CUDA tensors of ranks that share a GPU (staged through host memory)
        enable_torch_distributed(cpu)
    if backend in ("pynccl", "symm"):  # gloo stays below as the CPU group; the last plugin wins
        enable_pynccl(cpu, device)
    if backend == "symm":
        enable_symm_mem(cpu, device)
    if pp.size > 1:
        link_stages(tp, pp, world, device, timeout)
    return Groups(backend, cpu, world)


def resolve_dist_backend(name: str, device: torch.device, tp_size: int, local_ranks: int,
                         all_to_all: bool = False) -> str:
    """Who runs the tensor collectives. `auto`: PyNCCL when each of the `local_ranks` processes on
    this machine has its own GPU, else gloo (CPU, or ranks sharing a GPU: NCCL refuses two ranks on
    one device). PyNCCL (and the symmetric-memory path above it) has no all-to-all: where one is
    needed, `auto` takes torch's NCCL instead."""
    if name not in DIST_BACKENDS:
        raise ValueError(f"unknown dist backend {name!r}; available: {', '.join(DIST_BACKENDS)}")
    own_gpu = device.type == "cuda" and torch.cuda.device_count() >= local_ranks
    if name == "auto":
        return ("nccl" if all_to_all else "pynccl") if own_gpu and tp_size > 1 else "gloo"
    if name in ("pynccl", "symm") and all_to_all and tp_size > 1:
        raise ValueError(f"--moe-parallel ep needs an all-to-all, which {name} lacks; use --dist-backend nccl or auto")
    if name in ("nccl", "pynccl", "symm") and not own_gpu:
        where = "a CPU" if device.type != "cuda" else f"{torch.cuda.device_count()} GPU(s) for {local_ranks} ranks"
        raise ValueError(f"dist backend {name!r} needs one GPU per rank, got {where}; use --dist-backend gloo")
    return name


def enable_pynccl(cpu_group: dist.ProcessGroup, device: torch.device) -> None:
    """Put PyNCCL on top of the plugin list; rank 0's NCCL unique id travels over `cpu_group`."""
    DistributedCommunicator.plugins.append(PyNCCLCommunicator(cpu_group, device))


def destroy_distributed() -> None:
    """Drop the pipeline links and every plugin, then the torch.distributed groups."""
    disable_pipeline()
    for plugin in reversed(DistributedCommunicator.plugins):
        if isinstance(plugin, PyNCCLCommunicator):
            plugin.close()
    DistributedCommunicator.plugins.clear()
    if dist.is_initialized():
        dist.destroy_process_group()
