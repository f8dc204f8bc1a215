"""Tensor-parallel building blocks: each computes its local shape from `get_tp_info()` and
communicates only through `minisgl.distributed` (chapters 01, 04, 05, 07; the mixture-of-experts
block, chapter 14); `tp_ops` lets the capstone (chapter 15) replace their TP steps."""

from .activation import silu_and_mul
from .attention import AttentionLayer
from .base import BaseOP, MissingLayer, OPList
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
from .moe import SparseMoeBlock
from .moe_dispatch import DispatchPlan, dispatch_plan
from .norm import RMSNorm
from .rotary import RotaryEmbedding
from .tp_ops import TPOps, custom_tp_ops, use_tp_ops

__all__ = [
    "AttentionLayer",
    "BaseOP",
    "ColumnParallelLinear",
    "DispatchPlan",
    "MergedColumnParallelLinear",
    "MissingLayer",
    "OPList",
    "ParallelLMHead",
    "QKVParallelLinear",
    "RMSNorm",
    "ReplicatedLinear",
    "RotaryEmbedding",
    "RowParallelLinear",
    "SparseMoeBlock",
    "TPOps",
    "VocabParallelEmbedding",
    "custom_tp_ops",
    "dispatch_plan",
    "divide",
    "kv_head_offset",
    "local_kv_heads",
    "silu_and_mul",
    "use_tp_ops",
    "vocab_shard_size",
]
