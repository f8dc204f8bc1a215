"""Chapter 04 reference: the head map, the shard rules and the streaming shard-then-merge loop,
written out as minisgl/models/weight.py and minisgl/layers/linear.py do them."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import torch

from minisgl.models.config import ModelConfig

COLUMN_PARALLEL = ("q_proj", "gate_proj", "up_proj")  # split dim 0
ROW_PARALLEL = ("o_proj", "down_proj")  # weights split dim 1; biases whole
VOCAB_PARALLEL = ("embed_tokens", "lm_head")  # dim 0 in ceil(V / tp) rows, zero-padded
FUSED = {"q_proj": ("qkv_proj", 0, 3), "k_proj": ("qkv_proj", 1, 3), "v_proj": ("qkv_proj", 2, 3),
         "gate_proj": ("gate_up_proj", 0, 2), "up_proj": ("gate_up_proj", 1, 2)}  # -> (fused, slot, parts)


def kv_heads_of_rank(rank: int, tp_size: int, num_kv_heads: int) -> tuple[int, int]:
    if not 0 <= rank < tp_size:
        raise ValueError(f"rank {rank} is not one of tp_size={tp_size} ranks")
    if num_kv_heads % tp_size == 0:
        per_rank = num_kv_heads // tp_size
        return rank * per_rank, per_rank
    if tp_size % num_kv_heads == 0:  # tp / kv neighbouring ranks share one KV head
        return rank // (tp_size // num_kv_heads), 1
    raise ValueError(f"tp_size={tp_size} neither divides nor is a multiple of num_key_value_heads={num_kv_heads}")


def _split(total: int, tp_size: int, what: str) -> int:
    if total % tp_size != 0:
        raise ValueError(f"tp_size={tp_size} does not divide {what}={total}")
    return total // tp_size


def _rows(tensor: torch.Tensor, count: int, what: str, expected: int) -> None:
    if tensor.shape[0] != expected:
        raise ValueError(f"{what} has {tensor.shape[0]} rows, expected {count} heads x head_dim = {expected}")


def shard_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, rank: int, tp_size: int,
              num_heads: int, num_kv_heads: int, head_dim: int) -> torch.Tensor:
    _rows(q, num_heads, "q", num_heads * head_dim)
    _rows(k, num_kv_heads, "k", num_kv_heads * head_dim)
    _rows(v, num_kv_heads, "v", num_kv_heads * head_dim)
    local_heads = _split(num_heads, tp_size, "num_attention_heads")
    first_kv, num_kv = kv_heads_of_rank(rank, tp_size, num_kv_heads)
    q_local = q[rank * local_heads * head_dim:(rank + 1) * local_heads * head_dim]  # [local_q * d, hidden]
    k_local = k[first_kv * head_dim:(first_kv + num_kv) * head_dim]  # [local_kv * d, hidden]
    v_local = v[first_kv * head_dim:(first_kv + num_kv) * head_dim]
    return torch.cat([q_local, k_local, v_local], dim=0)


def shard_tensor(name: str, tensor: torch.Tensor, rank: int, tp_size: int, config: ModelConfig) -> torch.Tensor:
    module = name.split(".")[-2] if "." in name else ""
    if module in ("k_proj", "v_proj"):
        first, count = kv_heads_of_rank(rank, tp_size, config.num_kv_heads)
        return tensor[first * config.head_dim:(first + count) * config.head_dim].clone()
    if module in COLUMN_PARALLEL:
        size = _split(tensor.shape[0], tp_size, f"dim 0 of {name}")
        return tensor[rank * size:(rank + 1) * size].clone()
    if module in ROW_PARALLEL and name.endswith(".weight"):
        size = _split(tensor.shape[1], tp_size, f"dim 1 of {name}")
        return tensor[:, rank * size:(rank + 1) * size].clone()
    if module in VOCAB_PARALLEL:
        shard_size = -(-config.vocab_size // tp_size)
        rows = tensor[rank * shard_size:(rank + 1) * shard_size]  # fewer rows (or none) on the last rank(s)
        shard = torch.zeros(shard_size, *tensor.shape[1:], dtype=tensor.dtype, device=tensor.device)
        shard[:rows.shape[0]] = rows
        return shard
    return tensor.clone()  # norms and row-parallel biases: whole, in memory of their own


def shard_and_merge(tensors: Iterable[tuple[str, torch.Tensor]], rank: int, tp_size: int,
                    config: ModelConfig) -> Iterator[tuple[str, torch.Tensor]]:
    waiting: dict[str, dict[int, torch.Tensor]] = {}  # fused name -> slot -> shard
    for name, full in tensors:
        if "rotary_emb" in name or (config.tie_word_embeddings and name.startswith("lm_head.")):
            continue
        local = shard_tensor(name, full, rank, tp_size, config)
        del full  # only the shard stays alive
        module = name.split(".")[-2] if "." in name else ""
        if module not in FUSED:
            yield name, local
            continue
        fused_module, slot, parts = FUSED[module]
        fused = name.replace(f".{module}.", f".{fused_module}.")
        group = waiting.setdefault(fused, {})
        group[slot] = local
        if len(group) == parts:
            del waiting[fused]
            yield fused, torch.cat([group[i] for i in range(parts)], dim=0)  # slot order, not arrival order
    if waiting:
        raise ValueError(f"the checkpoint ended with parts of {sorted(waiting)} missing")
