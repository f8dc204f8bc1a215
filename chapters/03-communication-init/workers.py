"""Code that runs inside each rank for chapter 03: what a freshly joined gloo group offers, the
plugin seam of `minisgl.distributed`, and the unique-id broadcast that bootstraps NCCL."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

import minisgl.distributed as msd
from minisgl.distributed import DistributedCommunicator


def hello(rank: int, world_size: int) -> dict:
    """run_ranks already called init_process_group("gloo") and enable_torch_distributed()."""
    x = torch.tensor([float(rank + 1)])
    dist.all_reduce(x)  # raw torch.distributed: 1 + 2 + ... + world_size on every rank
    return {
        "backend": dist.get_backend(),
        "rank/size": (dist.get_rank(), dist.get_world_size()),
        "tp_info": msd.get_tp_info(),
        "sum": x.item(),
        "plugins": [type(p).__name__ for p in DistributedCommunicator.plugins],
    }


class GatherThenSum:
    """A second all-reduce algorithm: gather every rank's tensor, add them up locally.

    Each rank receives the other tp - 1 tensors whole, where a bandwidth-optimal all-reduce (ring:
    chapter 09) moves 2 (tp - 1) / tp of one: tp / 2 times the data (the same at tp = 2, more beyond).
    It is correct all the same, and the layers cannot tell: that is the point of the seam.
    """

    def __init__(self, inner) -> None:
        self.inner = inner
        self.calls = 0

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        size = dist.get_world_size()
        gathered = self.inner.all_gather(x.unsqueeze(0))  # [size, *x.shape]
        return gathered.view(size, *x.shape).sum(dim=0)

    def all_gather(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner.all_gather(x)


def swap_plugin(rank: int, world_size: int) -> dict:
    """The same minisgl.distributed.all_reduce call, before and after a plugin is appended."""
    x = torch.arange(4.0) + 10 * rank
    before = msd.all_reduce(x.clone())
    plugin = GatherThenSum(DistributedCommunicator.plugins[-1])
    DistributedCommunicator.plugins.append(plugin)  # the last plugin wins
    after = msd.all_reduce(x.clone())
    return {
        "plugins": [type(p).__name__ for p in DistributedCommunicator.plugins],
        "before": before.tolist(),
        "after": after.tolist(),
        "calls seen by the new plugin": plugin.calls,
    }


NCCL_UNIQUE_ID_BYTES = 128  # sizeof(ncclUniqueId) in nccl.h


def share_unique_id(rank: int, world_size: int) -> str:
    """How PyNCCL bootstraps: rank 0 makes an opaque id, the gloo CPU group broadcasts it.

    Real code gets the id from ncclGetUniqueId() and then calls ncclCommInitRank(id, size, rank);
    random bytes stand in for it here, which is all the broadcast cares about.
    """
    unique_id = os.urandom(NCCL_UNIQUE_ID_BYTES) if rank == 0 else bytes(NCCL_UNIQUE_ID_BYTES)
    # a CPU uint8 tensor over gloo: works before any GPU communicator exists
    unique_id = msd.broadcast_bytes(unique_id, dist.group.WORLD)
    return unique_id.hex()[:16] + "..."


def agree_on_pages(rank: int, world_size: int, my_pages: list[int]) -> int:
    """A control-plane collective: every rank proposes a KV page count, all take the minimum."""
    return msd.min_over_ranks(my_pages[rank], dist.group.WORLD)


def skip_collective(rank: int, world_size: int) -> float:
    """Rank 1 'forgets' the all-reduce and leaves; rank 0 must fail, not wait forever."""
    if rank == 1:
        return -1.0
    return msd.all_reduce(torch.ones(4)).sum().item()


def pynccl_all_reduce(rank: int, world_size: int) -> list[float]:
    """minisgl's own PyNCCL communicator (needs one GPU per rank): bootstrap, then one all-reduce."""
    from minisgl.distributed.pynccl import PyNCCLCommunicator

    device = torch.device("cuda", rank)
    torch.cuda.set_device(device)
    comm = PyNCCLCommunicator(dist.group.WORLD, device)  # rank 0's unique id travels over gloo
    x = torch.full((4,), float(rank + 1), device=device)
    comm.all_reduce(x)
    torch.cuda.synchronize(device)
    comm.close()
    return x.cpu().tolist()
