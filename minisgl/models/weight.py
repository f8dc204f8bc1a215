"""Streaming weight loading (chapter 04): shard each checkpoint tensor for this rank first, then merge
q/k/v -> qkv_proj and gate/up -> gate_up_proj. Only one full tensor is in host memory at a time,
plus the shards waiting in the merge buffer for their partners. The rules never ask what a tensor
is: they call `narrow`, `clone`, `to` and `torch.cat`, which the CPU plug-in's 4-bit GGUF weights
provide too (minisgl/cpu/gguf.py).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator

import torch

from minisgl.layers import kv_head_offset, local_kv_heads, vocab_shard_size

from .config import ModelConfig, ModelError
from .expert_weights import ExpertStacker

Named = tuple[str, torch.Tensor]  # (tensor name, tensor)
# (full tensors, rank, tp_size, config) -> this rank's tensors: `shard_and_merge`, or the capstone's
ShardAndMerge = Callable[[Iterable[Named], int, int, ModelConfig], Iterator[Named]]

COLUMN_PARALLEL = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")  # split dim 0 (outputs)
ROW_PARALLEL = ("o_proj", "down_proj")  # split dim 1 (inputs); their biases stay whole
VOCAB_PARALLEL = ("embed_tokens", "lm_head")  # split dim 0 (vocab rows), padded to tp * shard_size

# checkpoint projection -> (fused projection, position inside it)
MERGE_SLOTS = {"q_proj": ("qkv_proj", 0), "k_proj": ("qkv_proj", 1), "v_proj": ("qkv_proj", 2),
               "gate_proj": ("gate_up_proj", 0), "up_proj": ("gate_up_proj", 1)}
MERGE_SIZES = {"qkv_proj": 3, "gate_up_proj": 2}


def _module_name(tensor_name: str) -> str:
    """`model.layers.0.self_attn.q_proj.weight` -> `q_proj`."""
    parts = tensor_name.split(".")
    return parts[-2] if len(parts) >= 2 else ""


def shard_tensor(name: str, tensor: torch.Tensor, rank: int, tp_size: int, config: ModelConfig) -> torch.Tensor:
    """The part of checkpoint tensor `name` that rank `rank` of `tp_size` holds (a fresh copy)."""
    module = _module_name(name)
    is_weight = name.endswith(".weight")
    if module in ("k_proj", "v_proj"):
        # By KV head, not an even chunk: with fewer KV heads than ranks, neighbours share one head.
        num_local = local_kv_heads(config.num_kv_heads, tp_size)
        first_head = kv_head_offset(rank, config.num_kv_heads, tp_size)
        return tensor.narrow(0, first_head * config.head_dim, num_local * config.head_dim).clone()
    if module in COLUMN_PARALLEL:
        return _even_shard(tensor, 0, rank, tp_size)
    if module in ROW_PARALLEL and is_weight:
        return _even_shard(tensor, 1, rank, tp_size)
    if module in VOCAB_PARALLEL:
        shard_size = vocab_shard_size(config.vocab_size, tp_size)
        start = rank * shard_size
        rows = tensor[start : min(start + shard_size, config.vocab_size)]
        shard = torch.zeros(shard_size, *tensor.shape[1:], dtype=tensor.dtype)  # padding rows stay 0
        shard[: rows.shape[0]] = rows
        return shard
    return tensor.clone()  # norms and row-parallel biases: every rank keeps the whole tensor


def _even_shard(tensor: torch.Tensor, dim: int, rank: int, tp_size: int) -> torch.Tensor:
    """Slice `rank` of `tp_size` equal slices along `dim` (a copy)."""
    size = tensor.shape[dim] // tp_size
    return tensor.narrow(dim, rank * size, size).clone()


def merged_name(name: str) -> tuple[str, int] | None:
    """(fused tensor name, slot) for a tensor that is merged, else None."""
    module = _module_name(name)
    if module not in MERGE_SLOTS:
        return None
    fused, slot = MERGE_SLOTS[module]
    return name.replace(f".{module}.", f".{fused}."), slot


def shard_and_merge(
    tensors: Iterable[Named], rank: int, tp_size: int, config: ModelConfig, dtype: torch.dtype | None = None
) -> Iterator[Named]:
    """(engine weight name, this rank's tensor) for each checkpoint tensor as it arrives: its shard in `dtype`;
    the shards of q/k/v and gate/up wait until their group is complete, then leave as the fused tensor."""
    merge_buffer: dict[str, dict[int, torch.Tensor]] = {}
    experts = ExpertStacker(config, rank, tp_size, dtype)  # mixture-of-experts layers (chapter 14)
    for name, full in tensors:
        if "rotary_emb" in name or (config.tie_word_embeddings and name.startswith("lm_head.")):
            continue  # recomputed at start-up / shared with the embedding
        if experts.owns(name):
            stacked = experts.add(name, full)
            del full
            if stacked is not None:
                yield stacked
            continue
        local = shard_tensor(name, full, rank, tp_size, config).to(dtype=dtype)  # dtype None: as stored
        del full  # from here on only the shard is alive
        merge = merged_name(name)
        if merge is None:
            yield name, local
            continue
        fused, slot = merge
        parts = merge_buffer.setdefault(fused, {})
        parts[slot] = local
        if len(parts) == MERGE_SIZES[fused.split(".")[-2]]:
            del merge_buffer[fused]
            yield fused, torch.cat([parts[i] for i in range(len(parts))])  # slot order, not arrival
    if merge_buffer:
        raise ModelError(f"checkpoint is missing parts of {sorted(merge_buffer)[:3]}")
    experts.check_complete()


def load_weights(tensors: Iterable[Named], config: ModelConfig, rank: int, tp_size: int, dtype: torch.dtype,
                 device: torch.device, merge: ShardAndMerge | None = None) -> Iterator[Named]:
    """(engine weight name, local weight on `device` in `dtype`) for every (name, full tensor) of a checkpoint,
    by `shard_and_merge`, or by `merge` in its place (the capstone's, minisgl/models/tp_ops.py)."""
    merge = merge or functools.partial(shard_and_merge, dtype=dtype)
    for name, local in merge(tensors, rank, tp_size, config):
        yield name, local.to(dtype=dtype, device=device)
