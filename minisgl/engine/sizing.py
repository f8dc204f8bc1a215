"""How much of this rank's device the engine may take (chapter 11): the KV cache's pages, from
`--num-pages`, `--kv-memory-gb` or the memory free on the device. The engine then takes the minimum
over the ranks, so that every rank admits the same requests.

Then the batch limits a launch leaves to the device (chapters 06 and 10): how many requests decode
together and how many tokens one prefill step computes. The largest CUDA-graph batch follows the
first (graphs.py: the running limit, at most 256).

`LLM(...)` and the CLI leave `max_running_requests` and `max_prefill_tokens` at None unless they
are set; the engine fills them in with `with_batch_limits` once its KV pool is sized, and the
scheduler takes the engine's config. Every rank's pool has the same pages (the minimum over the
ranks), so every rank derives the same limits.

On a CPU they are the measured defaults, 64 requests and 2,048 tokens. On CUDA they follow from the
pool, which follows from the GPU's free memory:
- running requests: as many as the pool holds at `TOKENS_PER_REQUEST` tokens each, in multiples of
  8, from 8 to `MAX_RUNNING_REQUESTS`. More running requests amortise each decode step's weight
  stream over more tokens: at batch B a bf16 step does about B flops per weight byte, and an H200
  turns compute-bound near 200 flops a byte (990 TFLOP/s over 4.8 TB/s), so past about 256
  requests a step only gets longer (and 256 is the largest graph bucket we capture).
- prefill tokens: 1/64 of the pool, a power of two from 2,048 to 8,192. Prefill matmuls are
  compute-bound from a few thousand tokens on, and every prefill step holds the running decodes
  back, so larger chunks buy nothing; a small pool gets small chunks, which leave its pages to the
  running requests.

On an H200 (about 139 GiB free to torch, 85% of what the weights leave goes to the pool) this gives
256 running requests and 8,192 prefill tokens for the Qwen3-0.6B shape (a pool of ~1.1M tokens at
112 KiB each) and the SmolLM2 shape (~5M tokens at 22.5 KiB): the settings `benchmark/gpu_offline.py`
was tuned to. Llama-3.1-8B (~0.86M tokens at 128 KiB) gets 208 and 8,192; the same model on a 24 GB
GPU (~30k tokens) 8 and 2,048.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import torch

from minisgl.config import EngineConfig
from minisgl.kvcache import KVCachePool

_CPU_KV_BUDGET_CAP = 1 << 30  # 1 GiB per rank is ~20k SmolLM2 tokens in fp32: plenty on a laptop


def kv_pages(config: EngineConfig, device: torch.device, num_layers: int, kv_heads: int, head_dim: int,
             dtype: torch.dtype) -> int:
    """KV pages this rank can afford, for `num_layers` layers of `kv_heads` heads of `head_dim` in `dtype`."""
    if config.num_pages is not None:
        return config.num_pages
    page_bytes = config.page_size * KVCachePool.bytes_per_token(num_layers, kv_heads, head_dim, dtype)
    budget = config.kv_memory_gb * (1 << 30) if config.kv_memory_gb else default_kv_budget(config, device)
    return int(budget // page_bytes)


def default_kv_budget(config: EngineConfig, device: torch.device) -> float:
    """Bytes for the KV cache when no size was given: 85 % of what is free on a GPU, shared by the
    ranks on it; on a CPU 20 % of the host's available memory per rank, at most 1 GiB."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        # local ranks r, r + count, ... share GPU r: the busiest GPU hosts ceil(ranks / count)
        ranks_here = -(-config.local_world_size // max(1, torch.cuda.device_count()))
        return 0.85 * free / ranks_here
    return min(0.2 * available_host_memory() / config.local_world_size, _CPU_KV_BUDGET_CAP)


def available_host_memory(meminfo: Path = Path("/proc/meminfo")) -> int:
    """Bytes this machine can hand out now: Linux's MemAvailable, which counts the page cache and the
    other memory the kernel can reclaim. Free pages alone (the fallback where there is no MemAvailable)
    can be a small part of it: after a few GB of files were read, 16 of 24 GB sat in the page cache
    and a KV pool sized from free pages could no longer hold one 8,192-token request."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024  # the file counts kB
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


CPU_RUNNING_REQUESTS = 64
CPU_PREFILL_TOKENS = 2048
TOKENS_PER_REQUEST = 4096  # a request's KV the pool should hold for each running request
MAX_RUNNING_REQUESTS = 256
PREFILL_TOKENS_RANGE = (2048, 8192)
POOL_SHARE_PER_PREFILL = 64  # one prefill step computes at most 1/64 of the pool's tokens


def with_batch_limits(config: EngineConfig, pool_tokens: int) -> EngineConfig:
    """`config` with the limits left at None sized for its device and a KV pool of `pool_tokens`
    tokens; limits set by the user are kept."""
    if config.device == "cuda":
        running = min(MAX_RUNNING_REQUESTS, max(8, pool_tokens // TOKENS_PER_REQUEST // 8 * 8))
        low, high = PREFILL_TOKENS_RANGE
        share = max(1, pool_tokens // POOL_SHARE_PER_PREFILL)
        prefill = min(high, max(low, 1 << (share.bit_length() - 1)))  # the power of two at or below the share
    else:
        running, prefill = CPU_RUNNING_REQUESTS, CPU_PREFILL_TOKENS
    return dataclasses.replace(
        config,
        max_running_requests=config.max_running_requests or running,
        max_prefill_tokens=config.max_prefill_tokens or prefill,
    )
