"""Who am I among the tensor-parallel ranks, and the one seam every collective goes through.

Chapter 03 (communication init) teaches this folder. `grep -rn "all_reduce\\|all_gather" minisgl/`
lists every collective the engine performs.
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
from .info import DistributedInfo, get_tp_info, set_tp_info

__all__ = [
    "DistributedCommunicator",
    "DistributedImpl",
    "DistributedInfo",
    "PyNCCLDistributedImpl",
    "TorchDistributedImpl",
    "all_gather",
    "all_reduce",
    "collective_counts",
    "destroy_distributed",
    "enable_pynccl",
    "enable_torch_distributed",
    "get_tp_info",
    "reset_collective_counts",
    "set_tp_info",
]
