"""Who am I among the tensor-parallel ranks, and every collective a rank makes (chapter 03).

- `impl.py`: the tensor seam the layers call (`all_reduce`, `all_gather`) and its plugins;
- `control.py`: the control-plane collectives over the gloo CPU group (`min_over_ranks`,
  `broadcast_count`, `barrier`, `broadcast_bytes`);
- `all_to_all.py`: the all-to-all that sends tokens to their experts' ranks and back (expert
  parallelism, chapter 14);
- `counter.py`: the communication counter, bytes and time of each collective per forward and layer;
- `info.py`: `DistributedInfo`, this process's rank and the group size;
- `peers.py`: who the other ranks are (process, machine, pid), so a failed collective names a dead peer;
- `pipeline.py`: the point-to-point sends and receives between pipeline stages (chapter 13).

Outside this folder only the process-group setup (`Engine._init_communication`) touches
`torch.distributed`: `grep -rn "dist\\." minisgl/` shows no other collective.
"""

from .impl import (
    DistributedCommunicator,
    DistributedImpl,
    PyNCCLDistributedImpl,
    TorchDistributedImpl,
    all_gather,
    all_reduce,
    collective_counts,
    destroy_distributed,
    enable_pynccl,
    enable_torch_distributed,
    reset_collective_counts,
)
from .all_to_all import all_to_all_counts, all_to_all_rows
from .counter import COMM_COUNTER, comm_site
from .control import barrier, broadcast_bytes, broadcast_count, min_over_ranks
from .info import DistributedInfo, get_tp_info, set_tp_info
from .pipeline import (
    StageLinks,
    disable_pipeline,
    enable_pipeline,
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
    "PyNCCLDistributedImpl",
    "StageLinks",
    "TorchDistributedImpl",
    "all_gather",
    "all_reduce",
    "all_to_all_counts",
    "all_to_all_rows",
    "barrier",
    "broadcast_bytes",
    "broadcast_count",
    "collective_counts",
    "comm_site",
    "destroy_distributed",
    "disable_pipeline",
    "enable_pipeline",
    "enable_pynccl",
    "enable_torch_distributed",
    "get_tp_info",
    "min_over_ranks",
    "p2p_counts",
    "recv_from_prev_stage",
    "recv_step_from_prev_stage",
    "recv_tokens_from_last_stage",
    "reset_collective_counts",
    "send_step_to_next_stage",
    "send_to_next_stage",
    "send_tokens_to_first_stage",
    "set_tp_info",
    "wait_for_sends",
]
