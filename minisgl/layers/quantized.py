"""Weight-only 4-bit quantization on the CPU: a linear weight kept as 4-bit codes with one scale and
one minimum per group of inputs, multiplied by PyTorch's int4 CPU kernel (chapter 04, "Quantized
shards").

A weight W [out, in] becomes, for every group g of `group_size` consecutive inputs,

    W[n, k] = codes[n, k] * scale[n, g] + minimum[n, g],    g = k // group_size,  codes in 0..15

which is GGUF's Q4_1 block (d * q + m) as stored; Q4_0 (d * (q - 8)) is the same with minimum = -8d.
So the weights are the checkpoint's own 4.5 bits per weight, never re-rounded codes.

Two forms, one per stage:
- `Int4Weight`, the loader's form: codes as a plain [out, in] tensor (one code per byte), so
  sharding and merging are the same narrow / cat as for a dense weight, with the scales following
  their groups;
- `PackedInt4Weight`, the kernel's form (two codes per byte, in the tile order this CPU's kernel
  reads): what a linear layer holds, and what `linear()` dispatches on.

The kernel streams 4.5 bits per weight instead of 32 or 16, which is what a decode step of a few
rows waits for. It is no faster at arithmetic than a float GEMM (it widens every weight to fp32
before multiplying), so above `max_int4_rows` rows, where arithmetic decides, the same weights
run through F.linear from a dense copy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

KERNEL_CODE_OFFSET = 8  # the kernel reads codes 0..15 as the signed values -8..7
KERNEL_GROUP_SIZES = (32, 64, 128, 256)  # the group sizes the CPU kernel accepts
KERNEL_OUT_MULTIPLE = 16  # the kernel packs output rows in tiles of 16 (AVX2) or more


@dataclass
class Int4Weight:
    """A [out, in] weight as 4-bit codes plus a scale and a minimum per group of `group_size` inputs."""

    codes: torch.Tensor  # [out, in] uint8, values 0..15
    scale: torch.Tensor  # [out, in / group_size] float32
    minimum: torch.Tensor  # [out, in / group_size] float32
    group_size: int

    @property
    def shape(self) -> torch.Size:
        return self.codes.shape

    def narrow(self, dim: int, start: int, length: int) -> Int4Weight:
        """Rows (dim 0) or inputs (dim 1) [start, start + length), as views; an input slice must
        cover whole groups, since a group's scale cannot be split."""
        if dim == 0:
            return Int4Weight(self.codes.narrow(0, start, length), self.scale.narrow(0, start, length),
                              self.minimum.narrow(0, start, length), self.group_size)
        if start % self.group_size or length % self.group_size:
            raise ValueError(f"inputs [{start}, {start + length}) cut through a quantization group "
                             f"of {self.group_size} inputs")
        first, count = start // self.group_size, length // self.group_size
        return Int4Weight(self.codes.narrow(1, start, length), self.scale.narrow(1, first, count),
                          self.minimum.narrow(1, first, count), self.group_size)

    def clone(self) -> Int4Weight:
        return Int4Weight(self.codes.clone(), self.scale.clone(), self.minimum.clone(), self.group_size)

    def index_select(self, dim: int, index: torch.Tensor) -> Int4Weight:
        """Rows in the order `index` gives (dim must be 0: rows carry their own scales)."""
        if dim != 0:
            raise ValueError("only the rows of a quantized weight can be reordered")
        return Int4Weight(self.codes[index], self.scale[index], self.minimum[index], self.group_size)

    @staticmethod
    def cat_rows(parts: Sequence[Int4Weight]) -> Int4Weight:
        """Stack weights with the same inputs and grouping (q/k/v -> qkv_proj)."""
        return Int4Weight(torch.cat([p.codes for p in parts]), torch.cat([p.scale for p in parts]),
                          torch.cat([p.minimum for p in parts]), parts[0].group_size)

    def dequantize(self) -> torch.Tensor:
        """The float32 weight [out, in], computed as GGUF's own dequantizer does (a multiply, then an
        add), so it equals the converted checkpoint's tensor bit for bit."""
        scale = self.scale.repeat_interleave(self.group_size, dim=1)  # [out, in]
        minimum = self.minimum.repeat_interleave(self.group_size, dim=1)
        return self.codes.float() * scale + minimum

    def pack(self, dtype: torch.dtype, max_int4_rows: int | None) -> PackedInt4Weight:
        """The kernel's form, plus a dense copy in `dtype` for batches above `max_int4_rows` rows
        (None: the int4 kernel takes every batch, no dense copy). Fails with the reason when the
        kernel cannot take this shape."""
        out_features, in_features = self.shape
        if in_features % self.group_size:
            raise ValueError(f"{in_features} inputs are not whole groups of {self.group_size}; use --quantization none")
        if self.group_size not in KERNEL_GROUP_SIZES:
            raise ValueError(f"the int4 CPU kernel takes groups of {KERNEL_GROUP_SIZES} inputs, "
                             f"not {self.group_size}; use --quantization none")
        if out_features % KERNEL_OUT_MULTIPLE:
            raise ValueError(f"the int4 CPU kernel needs a multiple of {KERNEL_OUT_MULTIPLE} output rows per "
                             f"rank, this shard has {out_features}; use --quantization none or another tp size")
        # The kernel computes (code - 8) * scale + zero: zero = minimum + 8 * scale gives back W.
        zero = self.minimum + KERNEL_CODE_OFFSET * self.scale
        # [in / group, out, 2] bf16: the layout (and the precision) the kernel reads scales in
        scale_and_zero = torch.stack([self.scale.t(), zero.t()], dim=-1).to(torch.bfloat16).contiguous()
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(self.codes.to(torch.int32).contiguous(), 1)
        dense = None if max_int4_rows is None else self.dequantize().to(dtype)
        return PackedInt4Weight(packed, scale_and_zero, self.group_size, self.shape, dense, max_int4_rows)


@dataclass
class PackedInt4Weight:
    """What a quantized linear layer holds: 0.5 bytes per weight plus 4 bytes per group of scales,
    and (unless the int4 kernel takes every batch) the dense weight for large batches."""

    packed: torch.Tensor  # [out, in / 2] uint8: two codes per byte, in the kernel's tile order
    scale_and_zero: torch.Tensor  # [in / group_size, out, 2] bfloat16
    group_size: int
    shape: torch.Size  # [out, in] of the weight it stands for
    dense: torch.Tensor | None  # [out, in] in the model's dtype, for batches above max_int4_rows
    max_int4_rows: int | None  # None: every batch takes the int4 kernel

    def matmul(self, x: torch.Tensor) -> torch.Tensor:
        """x [tokens, in] @ W.T -> [tokens, out], in x's dtype.

        The kernel's vectorized path reads bf16 activations (its fp32 path is scalar, ~10x slower):
        it widens each weight and activation to fp32, accumulates in fp32, and rounds the result to
        bf16, so the output carries bf16 rounding even when x is fp32.
        """
        if self.dense is not None and x.shape[0] > self.max_int4_rows:
            return F.linear(x, self.dense)
        x_bf16 = x.to(torch.bfloat16).contiguous()
        return torch.ops.aten._weight_int4pack_mm_for_cpu(
            x_bf16, self.packed, self.group_size, self.scale_and_zero
        ).to(x.dtype)
