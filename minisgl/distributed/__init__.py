"""Who am I among the tensor-parallel ranks, the groups I join, and every collective a rank makes
(chapter 03).

- `impl.py`: `DistributedInfo`, this process's rank and the group size; the tensor seam the layers
  call (`all_reduce`, `all_gather`) with its plugins; the control-plane collectives over the gloo
  CPU group (`min_over_ranks`, `broadcast_count`, `barrier`, `broadcast_bytes`, `broadcast_json`);
- `groups.py`: `join`, which makes every group a rank needs and picks who runs the collectives;
- `pynccl.py`, `symm_mem.py`: our ctypes NCCL communicator, and the symmetric-memory all-reduce on
  top of it (chapters 03 and 13); `rendezvous.py`: where the ranks meet (chapter 12);
- `all_to_all.py`: the all-to-all that sends tokens to their experts' ranks and back (expert
  parallelism, chapter 14);
- `counter.py`: the communication counter, bytes and time of each collective per forward and layer;
- `peers.py`: who the other ranks are (process, machine, pid), so a failed collective names a dead peer;
- `pipeline.py`: the point-to-point sends and receives between pipeline stages (chapter 13).

Outside this folder nothing touches `torch.distributed`'s collectives or groups:
`grep -rn "dist\\." minisgl/` shows no other.
"""

from .all_to_all import all_to_all_counts, all_to_all_rows
from .counter import COMM_COUNTER, comm_site
from .groups import Groups, destroy_distributed, enable_pynccl, join, resolve_dist_backend
from .impl import (
    DistributedCommunicator,
    DistributedImpl,
    DistributedInfo,
    TorchDistributedImpl,
    all_gather,
    all_reduce,
    barrier,
    broadcast_bytes,
    broadcast_count,
    broadcast_json,
    collective_counts,
    enable_torch_distributed,
    get_tp_info,
    min_over_ranks,
    reset_collective_counts,
    set_tp_info,
)
from .pipeline import (
    p2p_counts,
    recv_from_prev_stage,
    recv_step_from_prev_stage,
    recv_tokens_from_last_stage,
    send_step_to_next_stage,
    send_to_next_stage,
    send_tokens_to_first_stage,
    wait_for_sends,
)

__all__ = [
    "COMM_COUNTER",
    "DistributedCommunicator",
    "DistributedImpl",
    "DistributedInfo",
    "Groups",
    "TorchDistributedImpl",
    "all_gather",
    "all_reduce",
    "all_to_all_counts",
    "all_to_all_rows",
    "barrier",
    "broadcast_bytes",
    "broadcast_count",
    "broadcast_json",
    "collective_counts",
    "comm_site",
    "destroy_distributed",
    "enable_pynccl",
    "enable_torch_distributed",
    "get_tp_info",
    "join",
    "min_over_ranks",
    "p2p_counts",
    "recv_from_prev_stage",
    "recv_step_from_prev_stage",
    "recv_tokens_from_last_stage",
    "reset_collective_counts",
    "resolve_dist_backend",
    "send_step_to_next_stage",
    "send_to_next_stage",
    "send_tokens_to_first_stage",
    "set_tp_info",
    "wait_for_sends",
]
