"""`EngineConfig`: everything one rank's engine needs to build itself; the launcher copies it once
per rank with that rank's `tp_info` (chapter 02) and `pp_info` (its pipeline stage, chapter 13),
and with multi-node or data parallelism, says where the rank sits among the processes of its
machine (chapter 12)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from minisgl.distributed import DistributedInfo
from minisgl.distributed.rendezvous import nodes_on_this_machine, usable_cores

if TYPE_CHECKING:
    from minisgl.layers.tp_ops import TPOps


@dataclass
class EngineConfig:
    model_path: Path
    tp_info: DistributedInfo = field(default_factory=lambda: DistributedInfo(0, 1))
    pp_info: DistributedInfo = field(default_factory=lambda: DistributedInfo(0, 1))  # pipeline stage (chapter 13)
    device: str = "cpu"  # "cpu" or "cuda"; rank r of a CUDA run uses cuda:{r % device_count}
    dtype: str = "auto"  # auto: bf16 on CUDA; on a CPU, what a start-up probe finds fastest (precision.py)
    page_size: int = 1
    num_pages: int | None = None  # KV pages; None sizes the pool from kv_memory_gb / free memory
    kv_memory_gb: float | None = None
    attention_backend: str = "auto"  # auto: "triton" on CUDA, "torch" on CPU; or "flashinfer" (optional)
    dist_backend: str = "auto"  # auto: "pynccl" with one GPU per rank, else "gloo"; or "nccl", or "symm"
    # (PyNCCL with the symmetric-memory one-shot all-reduce for small messages, chapter 13)
    dist_init_addr: str = ""  # the store: the launcher fills a fresh file (one machine) or node 0's tcp:// address
    nnodes: int = 1  # machines the tp ranks span: rank r runs on node r // (tp_size / nnodes) (chapter 12)
    dp_size: int = 1  # data-parallel replicas on this machine, each its own tp group (chapter 12)
    dp_rank: int = 0  # which replica this rank serves
    cpu_threads: int | None = None  # torch threads of a CPU rank; None: this machine's cores / its ranks
    dist_timeout_s: float = 600.0
    load_format: str = "safetensors"  # or "dummy": random weights from config.json alone
    quantization: str = "auto"  # "gguf": 4-bit linear weights (8-bit LM head) from the checkpoint's GGUF (CPU);
    # "none"; auto: gguf when dtype is auto, a GGUF is there, and the probe finds it faster
    max_quantized_rows: int | None = None  # with gguf: batches up to this many rows take the int4/int8 kernels,
    # larger ones dense weights; None: the probe's crossover
    matmul_dtype: str = "auto"  # CPU, fp32 activations: the dtype dense weights multiply in; "bfloat16" rounds
    # each matmul's inputs to bf16 (AMX / AVX512-BF16 units, fp32 sums); auto: bf16 where dtype auto's probe
    # finds it faster, else dtype
    kv_cache_dtype: str = "auto"  # auto: dtype; "bfloat16" with fp32 activations on a CPU: keys and values
    # stored as bf16 (half the KV bytes per token: twice the tokens in the same memory), widened back as read
    deterministic: bool = False  # batch-invariant: a request's tokens never depend on its batch (CPU)
    moe_parallel: str = "tp"  # a mixture-of-experts model's experts: "tp" splits each one, "ep" places
    # whole experts per rank and sends tokens to them (chapter 14)
    seed: int = 0
    progress: bool = True  # tqdm bar while loading weights (rank 0 only)
    max_running_requests: int = 64  # requests decoded together; sizes the device page table too
    cuda_graph_max_bs: int | None = None  # largest decode batch replayed as a CUDA graph; 0 disables;
    # None: max_running_requests (capped at 256)
    cpu_graph_max_bs: int | None = None  # largest decode batch replayed as a CPU graph of C calls (cpu_graph.py);
    # 0 disables; None: max_running_requests, or max_quantized_rows where smaller
    comm_stats_dir: str | None = None  # count bytes and time of every collective; each rank writes a JSON here
    trace_dir: str | None = None  # every process of the run records its timeline here (minisgl.trace)
    overlap_schedule: bool | None = None  # prepare step N+1 while the device runs step N;
    # None: on for CUDA, off for CPU (True forces it on a CPU too, for tests)
    tp_ops: TPOps | None = None  # another implementation of the TP layers' steps and of the loader's
    # shard-then-merge (minisgl/layers/tp_ops.py): the course's capstone plugs a learner's in; None: ours

    @property
    def world_size(self) -> int:
        """Ranks of one replica: pp stages of tp ranks each."""
        return self.pp_info.size * self.tp_info.size

    @property
    def world_rank(self) -> int:
        """This rank's place among them: stage after stage, tp rank within the stage."""
        return self.pp_info.rank * self.tp_info.size + self.tp_info.rank

    @property
    def local_world_size(self) -> int:
        """Scheduler processes on this machine: this node's share of the ranks, for every replica."""
        return self.dp_size * self.world_size // self.nnodes

    @property
    def rank_cpu_threads(self) -> int:
        """Torch threads of one CPU rank: `cpu_threads`, else the cores this process may use shared by
        every rank on the machine, this node's and those of the run's other nodes there (oversubscribed
        threads slow every rank down: two nodes on one machine each taking all its cores ran 13-19x
        slower than one launch)."""
        ranks_here = self.local_world_size * nodes_on_this_machine(self.dist_init_addr, self.nnodes)
        return self.cpu_threads or max(1, usable_cores() // ranks_here)

    @property
    def local_rank(self) -> int:
        """This rank's index among them (replica after replica), which picks its GPU and CPU share."""
        per_node = self.world_size // self.nnodes
        return self.dp_rank * per_node + self.world_rank % per_node
