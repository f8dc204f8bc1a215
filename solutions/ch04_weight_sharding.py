"""Chapter 04 reference: the engine's head mapping (minisgl.layers) and shard rules
(minisgl.models.weight.shard_tensor) and its streaming loop (minisgl.models.weight.shard_and_merge,
which `load_weights` runs over the checkpoint file)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import torch

from minisgl.layers import divide, kv_head_offset, local_kv_heads
from minisgl.models import weight
from minisgl.models.config import ModelConfig


def kv_heads_of_rank(rank: int, tp_size: int, num_kv_heads: int) -> tuple[int, int]:
    return kv_head_offset(rank, num_kv_heads, tp_size), local_kv_heads(num_kv_heads, tp_size)


def shard_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, rank: int, tp_size: int,
              num_heads: int, num_kv_heads: int, head_dim: int) -> torch.Tensor:
    local_heads = divide(num_heads, tp_size, "num_attention_heads")
    first_kv, num_kv = kv_heads_of_rank(rank, tp_size, num_kv_heads)
    q_local = q.narrow(0, rank * local_heads * head_dim, local_heads * head_dim)  # [local_q * d, hidden]
    k_local = k.narrow(0, first_kv * head_dim, num_kv * head_dim)  # [local_kv * d, hidden]
    v_local = v.narrow(0, first_kv * head_dim, num_kv * head_dim)
    return torch.cat([q_local, k_local, v_local], dim=0)


def shard_tensor(name: str, tensor: torch.Tensor, rank: int, tp_size: int, config: ModelConfig) -> torch.Tensor:
    return weight.shard_tensor(name, tensor, rank, tp_size, config)


def shard_and_merge(tensors: Iterable[tuple[str, torch.Tensor]], rank: int, tp_size: int,
                    config: ModelConfig) -> Iterator[tuple[str, torch.Tensor]]:
    return weight.shard_and_merge(tensors, config, rank, tp_size)
