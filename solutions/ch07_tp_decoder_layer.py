"""Chapter 07 reference: the engine's LlamaMLP pieces (MergedColumnParallelLinear, silu_and_mul,
RowParallelLinear) fed this rank's shards, and local sizes read off the engine's own layers and
config checks (minisgl.models.config, minisgl.layers, minisgl.kvcache)."""

from __future__ import annotations

from typing import Any

import torch

from minisgl.distributed import get_tp_info
from minisgl.kvcache import KVCachePool
from minisgl.layers import MergedColumnParallelLinear, RowParallelLinear, local_kv_heads, silu_and_mul, vocab_shard_size
from minisgl.models.config import ModelConfig

def tp_mlp_forward(x: torch.Tensor, gate: torch.Tensor, up: torch.Tensor, down: torch.Tensor) -> torch.Tensor:
    tp = get_tp_info()
    intermediate, hidden = gate.shape
    with torch.device("meta"):
        gate_up_proj = MergedColumnParallelLinear(hidden, [intermediate, intermediate])
        down_proj = RowParallelLinear(intermediate, hidden)
    # shard, then merge: [gate rows of this rank; up rows of this rank]
    gate_up_proj.weight = torch.cat([gate.chunk(tp.size, dim=0)[tp.rank], up.chunk(tp.size, dim=0)[tp.rank]])
    down_proj.weight = down.chunk(tp.size, dim=1)[tp.rank]  # [hidden, intermediate / tp]
    gate_up = gate_up_proj.forward(x)  # [tokens, 2 * intermediate / tp]
    return down_proj.forward(silu_and_mul(gate_up))  # [tokens, hidden], all-reduced


def local_shapes(hf_config: dict[str, Any], tp_size: int, dtype_bytes: int = 2) -> dict[str, int]:
    config = ModelConfig.from_dict(hf_config)
    try:
        config.check_tp_size(tp_size)
    except ValueError as error:  # ModelError: say it as a plain ValueError
        raise ValueError(str(error)) from None
    q_heads = config.num_heads // tp_size
    kv_heads = local_kv_heads(config.num_kv_heads, tp_size)
    intermediate = config.intermediate_size // tp_size
    return {
        "local_q_heads": q_heads,
        "local_kv_heads": kv_heads,
        "qkv_out": (q_heads + 2 * kv_heads) * config.head_dim,
        "o_proj_in": q_heads * config.head_dim,
        "gate_up_out": 2 * intermediate,
        "down_in": intermediate,
        "vocab_shard": vocab_shard_size(config.vocab_size, tp_size),
        # the engine's cache-size formula, counted in 1-byte elements, times the element size
        "kv_bytes_per_token": KVCachePool.bytes_per_token(config.num_layers, kv_heads, config.head_dim, torch.uint8)
        * dtype_bytes,
    }
