"""Tensor-parallel building blocks: each computes its local shape from `get_tp_info()` and
communicates only through `minisgl.distributed` (chapters 01, 04, 05, 07)."""

from .activation import silu_and_mul
from .attention import AttentionLayer
from .base import BaseOP, OPList
from .embedding import ParallelLMHead, VocabParallelEmbedding, vocab_shard_size
from .linear import (
    ColumnParallelLinear,
    MergedColumnParallelLinear,
    QKVParallelLinear,
    ReplicatedLinear,
    RowParallelLinear,
    divide,
    kv_head_offset,
    local_kv_heads,
)
from .norm import RMSNorm
from .rotary import RotaryEmbedding

__all__ = [
    "AttentionLayer",
    "BaseOP",
    "ColumnParallelLinear",
    "MergedColumnParallelLinear",
    "OPList",
    "ParallelLMHead",
    "QKVParallelLinear",
    "RMSNorm",
    "ReplicatedLinear",
    "RotaryEmbedding",
    "RowParallelLinear",
    "VocabParallelEmbedding",
    "divide",
    "kv_head_offset",
    "local_kv_heads",
    "silu_and_mul",
    "vocab_shard_size",
]
