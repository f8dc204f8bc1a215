"""Launch settings, resolved once (chapter 02): `EngineConfig` (what one rank's engine needs to build
itself), `SchedulerConfig` (that, plus the batching and caching choices of a rank), and
`resolve_config`, the one function that checks them. The CLI's flags (`server/args.py`) and
`LLM(...)`'s arguments become a `SchedulerConfig`, `resolve_config` checks it before any process
starts, and the launcher, `LLM`, the scheduler and the engine take its result as given.

The launcher copies the config once per rank with that rank's `tp_info` (chapter 02) and `pp_info`
(its pipeline stage, chapter 13); with multi-node or data parallelism (chapter 12) it also says
where the rank sits among the processes of its machine. `dtype="auto"` stays unresolved here: what
a CPU computes fastest is measured where the engine runs.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from minisgl.attention.base import resolve_attention_backend
from minisgl.distributed import DistributedInfo, resolve_dist_backend
from minisgl.distributed.rendezvous import nodes_on_this_machine, usable_cores
from minisgl.kvcache import CACHES
from minisgl.models.config import ModelConfig
from minisgl.models.stage import split_layers
from minisgl.process.nodes import check_dist_init_addr
from minisgl.trace import check_trace_dir

if TYPE_CHECKING:
    from minisgl.models.tp_ops import TPOps

DP_POLICIES = ("round-robin", "least-load")  # which replica gets each request (scheduler/data_parallel.py)
DTYPES = ("auto", "float32", "bfloat16", "float16")


class ArgsError(ValueError):
    """An invalid launch setting (a CLI flag or an `LLM(...)` argument); the message names the fix."""


@dataclass
class EngineConfig:
    model_path: Path
    tp_info: DistributedInfo = field(default_factory=lambda: DistributedInfo(0, 1))
    pp_info: DistributedInfo = field(default_factory=lambda: DistributedInfo(0, 1))  # pipeline stage (chapter 13)
    device: str = "cpu"  # "cpu" or "cuda" ("auto" until resolved); rank r of a CUDA run uses cuda:{r % device_count}
    dtype: str = "auto"  # auto: bf16 on CUDA; on a CPU, what a start-up probe finds fastest (where the engine runs)
    page_size: int = 1
    num_pages: int | None = None  # KV pages; None sizes the pool from kv_memory_gb / free memory
    kv_memory_gb: float | None = None
    attention_backend: str = "auto"  # auto: "triton" on CUDA, "torch" on CPU; or "flashinfer" (optional)
    dist_backend: str = "auto"  # auto: "pynccl" with one GPU per rank, else "gloo"; or "nccl", or "symm"
    # (PyNCCL with the symmetric-memory one-shot all-reduce for small messages, chapter 13)
    dist_init_addr: str = ""  # the store: the launcher fills a fresh file (one machine), or node 0's host:port
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
    max_running_requests: int | None = None  # requests decoded together; sizes the device page table too;
    # None: the engine sizes it with its KV pool (64 on a CPU; minisgl/engine/sizing.py)
    max_prefill_tokens: int | None = None  # token budget of one prefill step (the scheduler's); longer prompts
    # are chunked; None: sized with the KV pool (2,048 on a CPU; minisgl/engine/sizing.py)
    cuda_graph_max_bs: int | None = None  # largest decode batch replayed as a CUDA graph; 0 disables;
    # None: max_running_requests (capped at 256)
    cpu_graph_max_bs: int | None = None  # largest decode batch replayed as a CPU graph of C calls (cpu/graphs.py);
    # 0 disables; None: max_running_requests, or max_quantized_rows where smaller
    comm_stats_dir: str | None = None  # count bytes and time of every collective; each rank writes a JSON here
    trace_dir: str | None = None  # every process of the run records its timeline here (minisgl.trace)
    overlap_schedule: bool | None = None  # prepare step N+1 while the device runs step N;
    # None: on for CUDA, off for CPU (True forces it on a CPU too, for tests)
    tp_ops: TPOps | None = None  # another implementation of the TP layers' steps and of the loader's
    # shard-then-merge (minisgl/models/tp_ops.py): the course's capstone plugs a learner's in; None: ours

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


@dataclass
class SchedulerConfig(EngineConfig):
    cache: str = "radix"  # "radix": requests reuse the KV of cached prefixes; "naive": every prompt computed whole
    dp_policy: str = "round-robin"  # which replica gets each request when dp_size > 1 (DP_POLICIES, chapter 12)


def resolve_config(config: SchedulerConfig) -> SchedulerConfig:
    """`config` checked, with "auto" device, dist backend and attention backend chosen for this
    machine: every check that needs no child process. Raises `ArgsError` (or the model's `ModelError`)
    with one line that names the fix."""
    _check_sizes(config)
    _check_nodes(config)
    if config.trace_dir is not None:
        try:
            check_trace_dir(config.trace_dir)
        except ValueError as error:
            raise ArgsError(f"--trace: {error}") from None
    device = config.device if config.device != "auto" else "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cpu", "cuda"):
        raise ArgsError(f"unknown device {device!r}; use cpu or cuda")
    if device == "cuda" and not torch.cuda.is_available():
        raise ArgsError("--device cuda, but torch sees no CUDA GPU; use --device cpu")
    config = dataclasses.replace(config, device=device)
    if config.load_format not in ("safetensors", "dummy"):
        raise ArgsError(f"unknown load format {config.load_format!r}; use safetensors or dummy")
    if config.cache not in CACHES:
        raise ArgsError(f"unknown cache {config.cache!r}; use {' or '.join(CACHES)}")
    if config.dp_policy not in DP_POLICIES:
        raise ArgsError(f"unknown DP policy {config.dp_policy!r}; use one of {', '.join(DP_POLICIES)}")
    _check_precision(config)
    try:
        dist_backend = resolve_dist_backend(config.dist_backend, torch.device(device), config.tp_info.size,
                                            config.local_world_size, all_to_all=config.moe_parallel == "ep")
        attention_backend = resolve_attention_backend(config.attention_backend, torch.device(device))
    except ValueError as error:
        raise ArgsError(str(error)) from None

    model = ModelConfig.from_dir(config.model_path)  # a missing or foreign dir fails here
    model = model.with_moe_parallel(config.moe_parallel)  # "ep" on a dense model fails here
    model.check_tp_size(config.tp_info.size)  # "tp_size=2 does not divide ...; valid tp sizes: 1, 3"
    check_pipeline(model, config.pp_info.size, config.dp_size, config.nnodes)
    check_ranks_fit_machine(config)
    return dataclasses.replace(config, dist_backend=dist_backend, attention_backend=attention_backend)


def _check_sizes(config: SchedulerConfig) -> None:
    positive = {"--tp-size": config.tp_info.size, "--pp-size": config.pp_info.size, "--dp-size": config.dp_size,
                "--nnodes": config.nnodes, "--max-running-requests": config.max_running_requests,
                "--max-prefill-tokens": config.max_prefill_tokens, "--page-size": config.page_size}
    for flag, value in positive.items():
        if value is not None and value < 1:  # None: sized by the engine (minisgl/engine/sizing.py)
            raise ArgsError(f"{flag} must be at least 1, got {value}")
    for kind, value in (("CUDA", config.cuda_graph_max_bs), ("CPU", config.cpu_graph_max_bs)):
        if value is not None and value < 0:
            raise ArgsError(f"--{kind.lower()}-graph-max-bs must be >= 0 (0 disables {kind} graphs), got {value}")
    if config.num_pages is not None and config.num_pages < 2:
        raise ArgsError(f"--num-pages must be at least 2 (one page is reserved), got {config.num_pages}")
    if config.kv_memory_gb is not None and config.kv_memory_gb <= 0:
        raise ArgsError(f"--kv-memory-gb must be positive, got {config.kv_memory_gb}")


def _check_nodes(config: SchedulerConfig) -> None:
    """The multi-node and data-parallel settings fit together (chapter 12)."""
    if config.nnodes == 1:
        if config.dist_init_addr:
            raise ArgsError("--dist-init-addr is for multi-node runs; add --nnodes N (one machine needs no address)")
        return
    if not config.dist_init_addr:
        raise ArgsError(f"--nnodes {config.nnodes} needs --dist-init-addr HOST:PORT, an address of node 0 "
                        "that every node can reach")
    try:
        check_dist_init_addr(config.dist_init_addr)
    except ValueError as error:
        raise ArgsError(f"--dist-init-addr: {error}") from None
    if config.tp_info.size % config.nnodes != 0:
        raise ArgsError(f"--tp-size {config.tp_info.size} does not split over --nnodes {config.nnodes}: "
                        "every node runs the same number of ranks")
    if config.dp_size > 1:
        raise ArgsError("--dp-size > 1 runs its replicas on one machine; use --nnodes 1")


def _check_precision(config: SchedulerConfig) -> None:
    """The dtype names and the combinations the engine cannot run; what "auto" becomes is measured
    where the engine runs."""
    on_cpu = config.device == "cpu"
    if config.dtype not in DTYPES:
        raise ArgsError(f"unknown dtype {config.dtype!r}; use {', '.join(DTYPES)}")
    if config.quantization not in ("auto", "none", "gguf"):
        raise ArgsError(f"unknown quantization {config.quantization!r}; use auto, none or gguf")
    if config.quantization == "gguf" and not on_cpu:
        raise ArgsError("--quantization gguf runs on the CPU only (its 4-bit kernels are CPU kernels); "
                        "use none on CUDA")
    if config.quantization == "gguf" and config.load_format == "dummy":
        raise ArgsError("--load-format dummy has no GGUF to quantize from; use --quantization none")
    if config.deterministic and not on_cpu:
        raise ArgsError("--deterministic is implemented for the CPU (fixed-tile torch kernels); drop it on CUDA")
    if config.tp_ops is not None and (config.quantization == "gguf" or config.deterministic):
        raise ArgsError("custom tp_ops (the capstone) run dense weights their own way; "
                        "drop quantization='gguf' and deterministic=True")
    if config.matmul_dtype not in ("auto", config.dtype):
        if config.matmul_dtype not in ("float32", "bfloat16"):
            raise ArgsError(f"unknown matmul_dtype {config.matmul_dtype!r}; use auto, float32 or bfloat16")
        if not on_cpu or config.dtype != "float32" or config.deterministic:
            raise ArgsError(f"matmul_dtype {config.matmul_dtype} means {config.matmul_dtype} matmuls under fp32 "
                            "activations on a CPU: use it with dtype float32, without --deterministic (or set dtype "
                            "bfloat16 for bf16 throughout)")
    if config.kv_cache_dtype not in ("auto", "bfloat16", config.dtype):
        raise ArgsError(f"unknown kv_cache_dtype {config.kv_cache_dtype!r}; use auto or bfloat16")
    if config.kv_cache_dtype == "bfloat16" and config.dtype != "bfloat16" and not on_cpu:
        raise ArgsError("kv_cache_dtype bfloat16 under float32 activations runs on the CPU only; on CUDA use "
                        "dtype bfloat16, whose KV cache is bf16 already")


def check_pipeline(model: ModelConfig, pp_size: int, dp_size: int = 1, nnodes: int = 1) -> None:
    """`pp_size` stages fit the model's layers, and this launch (chapter 13)."""
    try:
        split_layers(model.num_layers, pp_size)  # "pp_size=4 exceeds num_hidden_layers=2: ..."
    except ValueError as error:
        raise ArgsError(f"--pp-size: {error}") from None
    if pp_size > 1 and (dp_size > 1 or nnodes > 1):
        raise ArgsError("pipeline parallelism runs on one machine without data parallelism here; "
                        "use pp_size > 1 with dp_size 1 and nnodes 1")


def max_cpu_ranks() -> int:
    """More ranks than this on CPU would only thrash: 4 processes per core."""
    return max(8, 4 * (os.cpu_count() or 1))


def check_ranks_fit_machine(config: EngineConfig) -> None:
    """This machine runs pp * tp / nnodes ranks of each of the dp replicas: on CPU that must stay
    sane; pipeline stages on CUDA need a GPU each (their NCCL groups refuse two ranks on one)."""
    tp_size, pp_size, dp_size, nnodes = config.tp_info.size, config.pp_info.size, config.dp_size, config.nnodes
    num_ranks = config.local_world_size
    if config.device == "cpu" and num_ranks > max_cpu_ranks():
        layout = f"tp_size={tp_size}" + (f" x pp_size={pp_size}" if pp_size > 1 else "")
        layout += f" x dp_size={dp_size}" if dp_size > 1 else ""
        layout += f" over {nnodes} nodes" if nnodes > 1 else ""
        raise ArgsError(f"{layout} needs {num_ranks} processes; this machine runs at most {max_cpu_ranks()} CPU "
                        f"ranks (4 per core); use a smaller tp{', pp' if pp_size > 1 else ''}"
                        f"{' or dp' if dp_size > 1 else ''} size")
    if config.device == "cuda" and pp_size > 1 and torch.cuda.device_count() < num_ranks:
        raise ArgsError(f"pipeline stages on CUDA need one GPU per rank: {num_ranks} ranks, "
                        f"{torch.cuda.device_count()} GPU(s); use fewer ranks or --device cpu")
