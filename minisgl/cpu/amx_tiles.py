"""Dense weights as bf16 AMX tiles, multiplied by minisgl's own kernel (CPU only; chapter 16, "AMX
tiles").

On a CPU with AMX, bf16 matmuls under fp32 activations (`matmul_dtype="bfloat16"`) go to
amx_gemm.c instead of oneDNN. The weight is reordered once, at load, into the
exact bytes an AMX tile load reads: for every 16 output rows and 32 inputs one 1 KiB tile holding
the inputs as pairs,

    tiles[nb, kb, p, 2 * n + e] = W[16 * nb + n, 32 * kb + 2 * p + e]      n, p < 16;  e < 2

which is W [out, in] viewed as [out / 16, 16, in / 32, 16, 2] with its 16 outputs moved inside
its 16 input pairs: one `permute`, after padding W with zeros to whole tiles.

Why a kernel of our own: at a decode batch's few rows oneDNN's bf16 GEMM runs at about half its
speed (SmolLM2's 121 weights from memory on 2 cores of an AMX Xeon: 40.9 vs 21.0 ms at 32 rows,
30.4 vs 16.4 ms at one), and it wants bf16 activations (two casts per call); this one takes fp32 in
and out, and is a C call a CPU graph can record.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .kernels import cpu_kernels
from .quantized import PackedWeight

TILE_OUTPUTS = 16  # weight rows per tile
TILE_INPUTS = 32  # inputs per tile: 16 pairs of bf16


def amx_tiles_available() -> bool:
    """Whether minisgl's AMX kernel runs here (built for this CPU, tiles granted by the OS)."""
    kernels = cpu_kernels()
    return kernels is not None and kernels.amx_bf16


@dataclass
class AmxTileWeight(PackedWeight):
    """An fp32 weight stored as bf16 AMX tiles [ceil(out / 16), ceil(in / 32), 16, 32], zero-padded.
    `dense` is kept only where the plain fp32 rows are read too (the tied embedding's lookups)."""

    tiles: torch.Tensor

    @staticmethod
    def from_dense(weight: torch.Tensor, keep_dense: bool) -> AmxTileWeight:
        out_tiles, in_tiles = -(-weight.shape[0] // TILE_OUTPUTS), -(-weight.shape[1] // TILE_INPUTS)
        padded = F.pad(weight.to(torch.bfloat16), (0, in_tiles * TILE_INPUTS - weight.shape[1],
                                                   0, out_tiles * TILE_OUTPUTS - weight.shape[0]))
        pairs = padded.view(out_tiles, TILE_OUTPUTS, in_tiles, TILE_INPUTS // 2, 2)  # [nb, n, kb, p, e]
        tiles = pairs.permute(0, 2, 3, 1, 4).reshape(out_tiles, in_tiles, TILE_INPUTS // 2, 2 * TILE_OUTPUTS)
        # tiles [nb, kb, p, 2n + e]
        return AmxTileWeight(weight.shape, weight if keep_dense else None, None, tiles.contiguous())

    def matmul(self, x: torch.Tensor) -> torch.Tensor:
        """x [tokens, in] fp32 @ W.T -> [tokens, out] fp32 (x rounded to bf16, sums in fp32)."""
        return cpu_kernels().bf16_tiles(self.tiles, x, *self.shape)

    @property
    def matmul_dtype(self) -> torch.dtype:
        """The dtype the products are taken in (as PrepackedFloatWeight.matmul_dtype)."""
        return torch.bfloat16
