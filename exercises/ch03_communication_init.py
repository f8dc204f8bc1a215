"""Chapter 03 (communication init): how NCCL ranks find each other.

An NCCL communicator needs one secret shared by all ranks: a 128-byte `ncclUniqueId`. Rank 0 asks
NCCL for it (`ncclGetUniqueId`), and the ranks need some channel that already works to share it:
the gloo CPU group. Every rank then calls `ncclCommInitRank(comm, world_size, id, rank)`
(minisgl/distributed/pynccl.py). Here `create_id` stands in for ncclGetUniqueId, so the exercise runs on
any CPU.
"""

from __future__ import annotations

from collections.abc import Callable

import torch.distributed as dist

UNIQUE_ID_BYTES = 128  # sizeof(ncclUniqueId)


def broadcast_unique_id(create_id: Callable[[], bytes], cpu_group: dist.ProcessGroup) -> bytes:
    """Task 03-communication-init/unique-id: the id of `cpu_group`'s rank 0, on every rank of it.

    create_id: returns UNIQUE_ID_BYTES fresh bytes; every call makes a different id
    cpu_group: a gloo process group (CPU tensors only); it need not be the default (WORLD) group
               nor start at global rank 0
    returns    the 128 bytes the group's rank 0 created, as `bytes`, on every rank of the group

    Contract:
    - only the group's rank 0 (`dist.get_rank(cpu_group) == 0`) calls create_id, exactly once;
    - exactly one `torch.distributed.broadcast`, on `cpu_group` (never the default group), from
      the group's rank 0 - whose *global* rank is `dist.get_global_rank(cpu_group, 0)` - and no
      other collective, also when the group has a single rank.

    Hint: a collective moves tensors, not bytes: use a uint8 tensor of shape [128].
    May use: torch, torch.distributed. Nothing of minisgl (PyNCCLCommunicator does this for real).
    """
    raise NotImplementedError("03-communication-init/unique-id")
