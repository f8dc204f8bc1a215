"""Control-plane collectives: the few integers and bytes the ranks agree on over the gloo CPU group
(chapter 03), next to the tensor seam in `impl.py`, so that this folder holds every collective a
rank makes.

- `min_over_ranks`: the KV-cache size every rank can afford (`Engine._sync_num_pages`);
- `broadcast_count`: how many messages rank 0 publishes this step (`ZmqIO.receive`, chapter 06);
- `barrier`: every SUB socket is connected before rank 0's first broadcast (`ZmqIO`);
- `broadcast_bytes`: rank 0's NCCL unique id, before NCCL exists (`PyNCCLCommunicator`);
- `broadcast_json`: rank 0's choice of precision, which every rank takes (`Engine`).

They move CPU tensors of a few bytes; `collective_counts()` counts only the tensor collectives of
the forward pass, which these never are.
"""

from __future__ import annotations

import json
from typing import Any

import torch
import torch.distributed as dist


def min_over_ranks(value: int, group: dist.ProcessGroup) -> int:
    """The smallest `value` any rank of `group` passed, on every rank."""
    tensor = torch.tensor([value], dtype=torch.int64)
    dist.all_reduce(tensor, op=dist.ReduceOp.MIN, group=group)
    return int(tensor.item())


def broadcast_count(count: int, group: dist.ProcessGroup) -> int:
    """Rank 0 of `group` sends `count`; every rank returns what rank 0 sent."""
    tensor = torch.tensor([count], dtype=torch.int64)
    dist.broadcast(tensor, group=group, group_src=0)
    return int(tensor.item())


def broadcast_bytes(data: bytes, group: dist.ProcessGroup) -> bytes:
    """Rank 0's `data` on every rank of `group`; every rank passes a buffer of the same length
    (the other ranks' contents are overwritten)."""
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
