"""Chapter 03 (communication init): how NCCL ranks find each other.

An NCCL communicator needs one secret shared by all ranks: a 128-byte `ncclUniqueId`. Rank 0 asks
NCCL for it (`ncclGetUniqueId`), and the ranks need some channel that already works to share it:
the gloo CPU group. Every rank then calls `ncclCommInitRank(comm, world_size, id, rank)`
(minisgl/kernel/pynccl.py). Here `create_id` stands in for ncclGetUniqueId, so the exercise runs on
any CPU.
"""

from __future__ import annotations

from collections.abc import Callable

import torch.distributed as dist

UNIQUE_ID_BYTES = 128  # sizeof(ncclUniqueId)


def broadcast_unique_id(create_id: Callable[[], bytes], cpu_group: dist.ProcessGroup) -> bytes:
    """Task 03-communication-init/unique-id: rank 0's id, on every rank of `cpu_group`.

    create_id: returns UNIQUE_ID_BYTES fresh bytes; only rank 0 (of `cpu_group`) may call it, since
               every call makes a different id
    cpu_group: a gloo process group (CPU tensors only)
    returns    the 128 bytes rank 0 created, as `bytes`, on every rank

    Hint: a collective moves tensors, not bytes: use a uint8 tensor of shape [128] and
    `torch.distributed.broadcast(..., src=<global rank of the group's rank 0>, group=cpu_group)`.
    """
    raise NotImplementedError("03-communication-init/unique-id")
