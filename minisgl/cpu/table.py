"""The CPU's kernel table (chapter 16): what the layers compute on a CPU once this plug-in is in.

Every op of the torch reference (minisgl/layers/kernels.py) is replaced where this CPU has
something faster computing the same math:
- fp32 tensors take minisgl's C kernels (kernels.py) for RMSNorm, RoPE, SiLU-and-multiply and the
  embedding lookup, one C call each, which a CPU graph can record (graphs.py); other dtypes, or a
  machine that could not build the kernels, keep the torch code;
- a matmul by a weight in a kernel's own form (`PackedWeight`: GGUF's 4-/8-bit codes, quantized.py;
  oneDNN's layout, prepacked.py; AMX tiles, amx_tiles.py) is that weight's own `matmul`;
- with `batch_invariant` (--deterministic), dense matmuls run on fixed row tiles (batch_invariant.py).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from minisgl.layers import TorchKernels

from .batch_invariant import in_row_tiles
from .kernels import CpuKernels
from .quantized import PackedWeight, dense_table


class CpuKernelTable(TorchKernels):
    """The kernel table of CPU tensors: minisgl's C kernels (`c`, None where they could not be
    built) for fp32, packed weights' own matmuls, and fixed row tiles under `batch_invariant`."""

    def __init__(self, c: CpuKernels | None, batch_invariant: bool) -> None:
        self.c = c
        self.batch_invariant = batch_invariant

    def linear(self, x: torch.Tensor, weight: torch.Tensor | PackedWeight,
               bias: torch.Tensor | None = None) -> torch.Tensor:
        if isinstance(weight, PackedWeight):
            y = weight.matmul(x)
            return y if bias is None else y + bias
        if self.batch_invariant:  # every row through a call of the same shape
            return in_row_tiles(x, lambda tile: F.linear(tile, weight, bias))
        return F.linear(x, weight, bias)

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float,
                 residual: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        if not self._in_c(x):
            return super().rms_norm(x, weight, eps, residual)
        normed, summed = self.c.rms_norm(x, weight, eps, residual)
        return normed, x if summed is None else summed

    def silu_and_mul(self, gate_up: torch.Tensor) -> torch.Tensor:
        return self.c.silu_and_mul(gate_up) if self._in_c(gate_up) else super().silu_and_mul(gate_up)

    def rope(self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor,
             cos_sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.c.rope(positions, q, k, cos_sin) if self._in_c(q) else super().rope(positions, q, k, cos_sin)

    def embedding(self, ids: torch.Tensor, table: torch.Tensor | PackedWeight) -> torch.Tensor:
        rows = dense_table(table)  # a tied 8-bit LM head keeps the dense rows beside its codes
        return self.c.embedding(ids, rows) if self._in_c(rows) else F.embedding(ids, rows)

    def _in_c(self, x: torch.Tensor) -> bool:
        """Whether the C kernels take x: they are built, and x is fp32 (every CPU tensor here is)."""
        return self.c is not None and x.dtype == torch.float32
