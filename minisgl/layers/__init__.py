"""Tensor-parallel building blocks: each computes its local shape from `get_tp_info()`, communicates
only through `minisgl.distributed` and computes only through its device's kernel table (`kernels`)
(chapters 01, 04, 05, 07; the mixture-of-experts block, chapter 14). The capstone (chapter 15)
replaces their TP steps from outside (minisgl/models/tp_ops.py)."""

from .activation import silu_and_mul
from .attention import AttentionLayer
from .base import BaseOP, OPList
from .embedding import ParallelLMHead, VocabParallelEmbedding, vocab_shard_size
from .kernels import TorchKernels, install_kernels, kernels_for
from .linear import (
    ColumnParallelLinear,
    LinearBase,
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

__all__ = [
    "AttentionLayer",
    "BaseOP",
    "ColumnParallelLinear",
    "DispatchPlan",
    "LinearBase",
    "MergedColumnParallelLinear",
    "OPList",
    "ParallelLMHead",
    "QKVParallelLinear",
    "RMSNorm",
    "ReplicatedLinear",
    "RotaryEmbedding",
    "RowParallelLinear",
    "SparseMoeBlock",
    "TorchKernels",
    "VocabParallelEmbedding",
    "dispatch_plan",
    "divide",
    "install_kernels",
    "kernels_for",
    "kv_head_offset",
    "local_kv_heads",
    "silu_and_mul",
    "vocab_shard_size",
]
