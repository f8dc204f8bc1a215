"""Dense linear weights reordered once, after loading, into oneDNN's blocked layout (chapter 16).

`F.linear` on the CPU hands a [out, in] weight to a BLAS GEMM, which copies it into the panel
layout its inner kernel reads, on every call. With a few dozen rows (a decode batch) that copy is
as much work as the multiply itself. oneDNN can do the reordering once: `_reorder_linear_weight`
returns the weight in the layout its GEMM reads, and `_linear_pointwise` multiplies by it (the
calls PyTorch's own compiler makes for frozen CPU models). Same fp32 arithmetic, another summation
order, so results differ from `F.linear` in the last bits, never in kind.

Measured on 2 AVX2 cores, one call at a time: the SmolLM2 LM head [49152, 576] at 32 rows
46.6 -> 20.8 ms, gate_up_proj [3072, 576] 1.26 -> 0.85 ms; at 1 row most layers are as fast
either way. Whole decode steps: `benchmark/offline_throughput.py`.

The packed copy may hold bf16 while the model computes in fp32 (`matmul_dtype`): each call rounds
its activations to bf16, multiplies on the CPU's bf16 units (AMX tiles, AVX512-BF16) with fp32
sums, and widens the result back. Everything else of the step (norms, RoPE, attention, SiLU) stays
fp32 in minisgl's C kernels, which bf16 activations would lose. `dtype="auto"` takes this where its
probe finds bf16 matmuls faster (precision.py). On a CPU with AMX, minisgl's own tile kernel
(amx_tiles.py) takes those matmuls instead of oneDNN: `dense_matmul_weight` picks the form.

Not used for `--deterministic` (it keeps the fixed-tile F.linear calls whose rows cannot depend on
the batch), for the capstone (its own matmuls take plain tensors), nor for bf16 models (that path
needs AVX-512 or AVX-NE-CONVERT, and F.linear already reaches oneDNN there).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from minisgl.layers import BaseOP, LinearBase, ParallelLMHead

from .amx_tiles import AmxTileWeight, amx_tiles_available
from .quantized import PackedWeight

# the batch size oneDNN picks its blocking for; any number of rows multiplies correctly
REORDER_FOR_ROWS = 32


def prepacking_available() -> bool:
    """Whether this PyTorch build has oneDNN and its linear-prepack ops (they are private ops)."""
    return (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
            and hasattr(torch.ops.mkldnn, "_linear_pointwise"))


@functools.cache
def bf16_prepacking_available() -> bool:
    """Whether oneDNN can hold bf16 weights on this CPU (it needs AVX512-BW/VL/DQ or AVX-NE-CONVERT;
    on an AVX2-only CPU the reorder refuses), tried once on a small weight."""
    if not prepacking_available():
        return False
    try:
        torch.ops.mkldnn._reorder_linear_weight(torch.zeros(8, 32, dtype=torch.bfloat16), REORDER_FOR_ROWS)
    except RuntimeError:
        return False
    return True


@dataclass
class PrepackedFloatWeight(PackedWeight):
    """An fp32 weight in oneDNN's layout, stored as `matmul_dtype` (fp32, or bf16 for bf16 matmuls
    under fp32 activations). `dense` is kept only where the plain fp32 rows are read too (the tied
    embedding's lookups)."""

    packed: torch.Tensor  # opaque oneDNN tensor standing for [out, in] in matmul_dtype
    matmul_dtype: torch.dtype = torch.float32

    @staticmethod
    def from_dense(weight: torch.Tensor, keep_dense: bool,
                   matmul_dtype: torch.dtype = torch.float32) -> PrepackedFloatWeight:
        packed = torch.ops.mkldnn._reorder_linear_weight(weight.to(matmul_dtype).contiguous(), REORDER_FOR_ROWS)
        return PrepackedFloatWeight(weight.shape, weight if keep_dense else None, None, packed, matmul_dtype)

    def matmul(self, x: torch.Tensor) -> torch.Tensor:
        """x [tokens, in] fp32 @ W.T -> [tokens, out] fp32 (multiplied in matmul_dtype)."""
        if self.matmul_dtype == torch.float32:
            return torch.ops.mkldnn._linear_pointwise(x, self.packed, None, "none", [], "")
        narrow = x.to(self.matmul_dtype)  # [tokens, in] bf16: the rounding this matmul dtype costs
        return torch.ops.mkldnn._linear_pointwise(narrow, self.packed, None, "none", [], "").to(x.dtype)



def matmuls_on_amx_tiles(matmul_dtype: torch.dtype) -> bool:
    """Whether dense matmuls in `matmul_dtype` go to minisgl's AMX tile kernel here (bf16 where the
    kernel runs), a C call, rather than to oneDNN, a PyTorch op."""
    return matmul_dtype == torch.bfloat16 and amx_tiles_available()


def dense_matmul_weight(weight: torch.Tensor, keep_dense: bool, matmul_dtype: torch.dtype) -> PackedWeight:
    """An fp32 weight in the form its matmuls run fastest here: bf16 AMX tiles for bf16 matmuls
    where minisgl's AMX kernel runs, else oneDNN's layout."""
    if matmuls_on_amx_tiles(matmul_dtype):
        return AmxTileWeight.from_dense(weight, keep_dense)
    return PrepackedFloatWeight.from_dense(weight, keep_dense, matmul_dtype)


def prepack_linear_weights(model: BaseOP, matmul_dtype: torch.dtype = torch.float32) -> None:
    """Swap every fp32 weight a matmul reads (linear layers, the LM head) for its prepacked form in
    `matmul_dtype`, in place, and so the dense copy a quantized weight keeps for large batches.
    Other dtypes stay plain tensors, and the rows a tied embedding looks up stay readable (fp32)
    beside the packed form."""
    for op in model.walk():
        if isinstance(op, LinearBase):
            owner, keep_dense = op, False
        elif isinstance(op, ParallelLMHead):
            tied = op._tied_embedding
            owner, keep_dense = (op, False) if tied is None else (tied, True)  # lookups read the dense rows
        else:
            continue
        weight = owner.weight
        if _is_cpu_fp32(weight):
            owner.weight = dense_matmul_weight(weight, keep_dense, matmul_dtype)
        elif isinstance(weight, PackedWeight) and _is_cpu_fp32(weight.dense):
            # a quantized weight's dense copy serves its large batches; a tied head's also its lookups
            weight.dense = dense_matmul_weight(weight.dense, keep_dense, matmul_dtype)


def _is_cpu_fp32(weight: object) -> bool:
    return isinstance(weight, torch.Tensor) and weight.dtype == torch.float32 and weight.device.type == "cpu"

