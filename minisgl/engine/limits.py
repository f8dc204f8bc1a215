"""The batch limits a launch leaves to the device: how many requests decode together and how many
tokens one prefill step computes (chapters 06 and 10). The largest CUDA-graph batch follows the
first (`Engine._init_cuda_graphs`: the running limit, at most 256).

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

from minisgl.config import EngineConfig

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
