"""fp32 linear weights reordered once, at load, into oneDNN's blocked layout (CPU only; chapter 04).

`F.linear` on the CPU hands a [out, in] weight to a BLAS GEMM, which copies it into the panel
layout its inner kernel reads, on every call. With a few dozen rows (a decode batch) that copy is
as much work as the multiply itself. oneDNN can do the reordering once: `_reorder_linear_weight`
returns the weight in the layout its GEMM reads, and `_linear_pointwise` multiplies by it (the
calls PyTorch's own compiler makes for frozen CPU models). Same fp32 arithmetic, another summation
order, so results differ from `F.linear` in the last bits, never in kind.

Measured on 2 AVX2 cores, one call at a time: the SmolLM2 LM head [49152, 576] at 32 rows
46.6 -> 20.8 ms, gate_up_proj [3072, 576] 1.26 -> 0.85 ms; at 1 row most layers are as fast
either way. Whole decode steps: `benchmark/offline_throughput.py`.

Not used for `--deterministic` (it keeps the fixed-tile F.linear calls whose rows cannot depend on
the batch), for the capstone (its own matmuls take plain tensors), nor for bf16 (that path needs
AVX-512 or AVX-NE-CONVERT, and F.linear already reaches oneDNN there).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from .base import BaseOP
from .embedding import ParallelLMHead
from .linear import _LinearBase
from .quantized import PackedWeight

# the batch size oneDNN picks its blocking for; any number of rows multiplies correctly
REORDER_FOR_ROWS = 32


def prepacking_available() -> bool:
    """Whether this PyTorch build has oneDNN and its linear-prepack ops (they are private ops)."""
    return (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
            and hasattr(torch.ops.mkldnn, "_linear_pointwise"))


@dataclass
class PrepackedFloatWeight(PackedWeight):
    """An fp32 weight in oneDNN's layout. `dense` is kept only where the plain rows are read too
    (the tied embedding's lookups)."""

    packed: torch.Tensor  # opaque oneDNN tensor standing for [out, in] fp32

    @staticmethod
    def from_dense(weight: torch.Tensor, keep_dense: bool) -> PrepackedFloatWeight:
        packed = torch.ops.mkldnn._reorder_linear_weight(weight.contiguous(), REORDER_FOR_ROWS)
        return PrepackedFloatWeight(weight.shape, weight if keep_dense else None, None, packed)

    def matmul(self, x: torch.Tensor) -> torch.Tensor:
        """x [tokens, in] fp32 @ W.T -> [tokens, out] fp32."""
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, None, "none", [], "")

    @property
    def kernel_bytes(self) -> int:
        return self.shape.numel() * 4


def prepack_linear_weights(model: BaseOP) -> None:
    """Swap every fp32 weight a matmul reads (linear layers, the LM head) for its prepacked form, in
    place, and so the dense copy a quantized weight keeps for large batches. Other dtypes stay
    plain tensors, and the rows a tied embedding looks up stay readable beside the packed form."""
    for op in _walk(model):
        if isinstance(op, _LinearBase):
            owner, keep_dense = op, False
        elif isinstance(op, ParallelLMHead):
            tied = op._tied_embedding
            owner, keep_dense = (op, False) if tied is None else (tied, True)  # lookups read the dense rows
        else:
            continue
        weight = owner.weight
        if _is_cpu_fp32(weight):
            owner.weight = PrepackedFloatWeight.from_dense(weight, keep_dense)
        elif isinstance(weight, PackedWeight) and _is_cpu_fp32(weight.dense):
            # a quantized weight's dense copy serves its large batches; a tied head's also its lookups
            weight.dense = PrepackedFloatWeight.from_dense(weight.dense, keep_dense)


def _is_cpu_fp32(weight: object) -> bool:
    return isinstance(weight, torch.Tensor) and weight.dtype == torch.float32 and weight.device.type == "cpu"


def _walk(op: BaseOP) -> Iterator[BaseOP]:
    yield op
    for _, child in op.named_children():
        yield from _walk(child)
