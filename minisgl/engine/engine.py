"""One rank's engine: bind the device, join the TP group, build the model on the meta device and
stream its shard in, size the KV cache (the same on every rank), and run forward + sample
(chapters 02-04).
"""

from __future__ import annotations

import logging
import os
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from minisgl.attention import create_attention_backend
from minisgl.core import Batch, forward_context
from minisgl.distributed import destroy_distributed, enable_torch_distributed, set_tp_info
from minisgl.kvcache import KVCachePool
from minisgl.layers import local_kv_heads
from minisgl.models.config import ModelConfig
from minisgl.models.registry import create_model
from minisgl.models.weight import load_dummy_weights, load_weights

from .config import EngineConfig
from .sampler import sample

logger = logging.getLogger(__name__)

_CPU_KV_BUDGET_CAP = 1 << 30  # 1 GiB per rank is ~20k SmolLM2 tokens in fp32: plenty on a laptop


class Engine:
    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.model_path = Path(config.model_path)
        tp = config.tp_info
        set_tp_info(tp.rank, tp.size)  # first: every layer constructor reads it
        self.model_config = ModelConfig.from_dir(self.model_path)
        self.model_config.check_tp_size(tp.size)
        self.device = _bind_device(config)
        self.dtype = resolve_dtype(config.dtype, self.device)
        self.cpu_group = self._init_communication()

        with torch.device("meta"):  # shapes only; real tensors arrive from the loader
            self.model = create_model(self.model_config)
        self._load_weights()

        self.kv_pool = KVCachePool(
            self.model_config.num_layers,
            self._sync_num_pages(),
            config.page_size,
            local_kv_heads(self.model_config.num_kv_heads, tp.size),
            self.model_config.head_dim,
            self.dtype,
            self.device,
        )
        self.attn_backend = create_attention_backend(config.attention_backend, self.kv_pool, self.device)

    def _init_communication(self) -> dist.ProcessGroup | None:
        """A gloo group for CPU control messages; tensor collectives on gloo or NCCL (chapter 03)."""
        tp = self.config.tp_info
        if tp.size == 1:
            return None
        timeout = timedelta(seconds=self.config.dist_timeout_s)
        backend = self.config.dist_backend
        if backend == "nccl":
            dist.init_process_group("nccl", init_method=self.config.dist_init_addr, rank=tp.rank,
                                    world_size=tp.size, timeout=timeout, device_id=self.device)
            cpu_group = dist.new_group(backend="gloo", timeout=timeout)
            enable_torch_distributed(dist.group.WORLD)
            return cpu_group
        if backend != "gloo":
            raise ValueError(f"unknown dist backend {backend!r}; available: gloo, nccl")
        dist.init_process_group("gloo", init_method=self.config.dist_init_addr, rank=tp.rank,
                                world_size=tp.size, timeout=timeout)
        enable_torch_distributed(dist.group.WORLD)
        return dist.group.WORLD

    def _load_weights(self) -> None:
        tp = self.config.tp_info
        if self.config.load_format == "dummy":
            load_dummy_weights(self.model, self.dtype, self.device, self.config.seed)
            return
        loaded = load_weights(
            self.model_path, self.model_config, tp.rank, tp.size, self.dtype, self.device,
            progress=self.config.progress and tp.rank == 0,
        )
        for name, tensor in loaded:
            self.model.set_weight(name, tensor)
        still_empty = [name for name, t in self.model.state_dict().items() if t.is_meta]
        if still_empty:
            raise ValueError(f"checkpoint has no tensor for {still_empty[:3]}")

    def _sync_num_pages(self) -> int:
        """Pages every rank can afford; the minimum over ranks, so all ranks admit the same requests."""
        config, model = self.config, self.model_config
        page_bytes = config.page_size * KVCachePool.bytes_per_token(
            model.num_layers, local_kv_heads(model.num_kv_heads, config.tp_info.size), model.head_dim, self.dtype
        )
        if config.num_pages is not None:
            num_pages = config.num_pages
        else:
            budget = config.kv_memory_gb * (1 << 30) if config.kv_memory_gb else self._default_kv_budget()
            num_pages = int(budget // page_bytes)
        if self.cpu_group is not None:
            pages = torch.tensor([num_pages], dtype=torch.int64)
            dist.all_reduce(pages, op=dist.ReduceOp.MIN, group=self.cpu_group)
            num_pages = int(pages.item())
        return num_pages

    def _default_kv_budget(self) -> float:
        if self.device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(self.device)
            ranks_here = max(1, self.config.tp_info.size // max(1, torch.cuda.device_count()))
            return 0.85 * free / ranks_here
        available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        return min(0.2 * available / self.config.tp_info.size, _CPU_KV_BUDGET_CAP)

    @torch.inference_mode()
    def forward(self, batch: Batch) -> list[int]:
        """Run the model on `batch` and sample one token per request (identical on every rank)."""
        self.attn_backend.prepare(batch)
        with forward_context(batch, self.attn_backend):
            logits = self.model.forward(batch)  # [num_reqs, vocab]
        return sample(logits, batch.reqs)

    def shutdown(self) -> None:
        destroy_distributed()


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    """`auto` is bf16 on CUDA and on CPUs with native bf16 math; fp32 elsewhere (an AVX2-only CPU
    runs a bf16 matmul about 100x slower than fp32)."""
    if name == "auto":
        if device.type == "cuda" or _cpu_has_fast_bf16():
            return torch.bfloat16
        return torch.float32
    dtypes = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
              "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}
    if name not in dtypes:
        raise ValueError(f"unknown dtype {name!r}; use auto, float32, bfloat16 or float16")
    return dtypes[name]


def _cpu_has_fast_bf16() -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            flags = f.read()
    except OSError:
        return False
    return "amx_bf16" in flags or "avx512_bf16" in flags


def _bind_device(config: EngineConfig) -> torch.device:
    if config.device == "cpu":
        # ranks share the cores: oversubscribed threads slow every rank down
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // config.tp_info.size))
        return torch.device("cpu")
    if config.device == "cuda":
        if not torch.cuda.is_available():
            raise ValueError("--device cuda, but torch sees no CUDA GPU; use --device cpu")
        # several ranks may share one GPU (gloo only): rank r -> GPU r mod count
        device = torch.device(f"cuda:{config.tp_info.rank % torch.cuda.device_count()}")
        torch.cuda.set_device(device)
        return device
    raise ValueError(f"unknown device {config.device!r}; use cpu or cuda")
