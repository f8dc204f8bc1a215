"""Chapter 07 reference: the MLP as column (fused gate/up) -> SiLU-and-multiply -> row + one
all-reduce, and the local sizes of a decoder layer computed from the config alone."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from minisgl.distributed import all_reduce, get_tp_info
from minisgl.layers import silu_and_mul

REQUIRED = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "vocab_size")


def tp_mlp_forward(x: torch.Tensor, gate: torch.Tensor, up: torch.Tensor, down: torch.Tensor) -> torch.Tensor:
    tp = get_tp_info()
    intermediate = gate.shape[0]
    if intermediate % tp.size != 0:
        raise ValueError(f"tp_size={tp.size} does not divide intermediate_size={intermediate}")
    size = intermediate // tp.size
    rows = slice(tp.rank * size, (tp.rank + 1) * size)
    gate_up = torch.cat([gate[rows], up[rows]])  # [2 * intermediate / tp, hidden]: shard, then fuse
    down_shard = down[:, rows]  # [hidden, intermediate / tp], a strided view: fine on every device
    partial = F.linear(silu_and_mul(F.linear(x, gate_up)), down_shard)  # [tokens, hidden]
    return all_reduce(partial)


def valid_tp_sizes(heads: int, kv_heads: int, intermediate: int) -> list[int]:
    return [tp for tp in range(1, heads + 1)
            if heads % tp == 0 and intermediate % tp == 0 and (kv_heads % tp == 0 or tp % kv_heads == 0)]


def local_shapes(hf_config: dict[str, Any], tp_size: int, dtype_bytes: int = 2) -> dict[str, int]:
    missing = [key for key in REQUIRED if key not in hf_config]
    if missing:
        raise ValueError(f"the config lacks {', '.join(missing)}")
    heads, hidden = hf_config["num_attention_heads"], hf_config["hidden_size"]
    kv_heads = hf_config.get("num_key_value_heads") or heads
    head_dim = hf_config.get("head_dim") or hidden // heads
    intermediate = hf_config["intermediate_size"]
    valid = valid_tp_sizes(heads, kv_heads, intermediate)
    if tp_size not in valid:
        raise ValueError(f"tp_size={tp_size} does not fit this model; valid tp sizes: {', '.join(map(str, valid))}")
    q_local, kv_local = heads // tp_size, max(1, kv_heads // tp_size)
    return {
        "local_q_heads": q_local,
        "local_kv_heads": kv_local,
        "qkv_out": (q_local + 2 * kv_local) * head_dim,
        "o_proj_in": q_local * head_dim,
        "gate_up_out": 2 * intermediate // tp_size,
        "down_in": intermediate // tp_size,
        "vocab_shard": -(-hf_config["vocab_size"] // tp_size),
        "kv_bytes_per_token": 2 * hf_config["num_hidden_layers"] * kv_local * head_dim * dtype_bytes,  # K and V
    }
