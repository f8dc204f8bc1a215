"""`EngineConfig`: everything one rank's engine needs to build itself; the launcher copies it once
per rank with that rank's `tp_info` (chapter 02)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from minisgl.distributed import DistributedInfo

if TYPE_CHECKING:
    from minisgl.layers.tp_ops import TPOps


@dataclass
class EngineConfig:
    model_path: Path
    tp_info: DistributedInfo = field(default_factory=lambda: DistributedInfo(0, 1))
    device: str = "cpu"  # "cpu" or "cuda"; rank r of a CUDA run uses cuda:{r % device_count}
    dtype: str = "auto"  # auto: bf16 on CUDA and on CPUs with native bf16, else fp32
    page_size: int = 1
    num_pages: int | None = None  # KV pages; None sizes the pool from kv_memory_gb / free memory
    kv_memory_gb: float | None = None
    attention_backend: str = "auto"  # auto: "triton" on CUDA, "torch" on CPU; or "flashinfer" (optional)
    dist_backend: str = "auto"  # auto: "pynccl" with one GPU per rank, else "gloo"; or "nccl"
    dist_init_addr: str = ""  # torch.distributed init_method; the launcher fills a fresh store file for tp > 1
    dist_timeout_s: float = 600.0
    load_format: str = "safetensors"  # or "dummy": random weights from config.json alone
    seed: int = 0
    progress: bool = True  # tqdm bar while loading weights (rank 0 only)
    max_running_requests: int = 64  # requests decoded together; sizes the device page table too
    cuda_graph_max_bs: int | None = None  # largest decode batch replayed as a CUDA graph; 0 disables;
    # None: max_running_requests (capped at 256)
    overlap_schedule: bool | None = None  # prepare step N+1 while the device runs step N;
    # None: on for CUDA, off for CPU (True forces it on a CPU too, for tests)
    tp_ops: TPOps | None = None  # another implementation of the TP layers' steps and of the loader's
    # shard-then-merge (minisgl/layers/tp_ops.py): the course's capstone plugs a learner's in; None: ours
