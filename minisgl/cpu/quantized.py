"""Weight-only quantization on the CPU: a linear weight kept as 4-bit codes with one scale and one
minimum per group of inputs, and the LM head as 8-bit codes with one scale per group of 32 inputs,
multiplied by minisgl's own C kernels (quant_gemv.c) where this machine could build them, else by
PyTorch's int4 / int8 CPU kernels (chapter 16, "4-bit shards").

A weight W [out, in] becomes, for every group g of `group_size` consecutive inputs,

    W[n, k] = codes[n, k] * scale[n, g] + minimum[n, g],    g = k // group_size,  codes in 0..15

which is GGUF's Q4_1 block (d * q + m) as stored; Q4_0 (d * (q - 8)) is the same with minimum = -8d.
So the weights are the checkpoint's own 4.5 bits per weight, never re-rounded codes.

Two forms, one per stage:
- `Int4Weight`, the loader's form: codes as a plain [out, in] tensor (one code per byte), with the
  few tensor methods the loader's shard rules call (`narrow`, `clone`, `index_select`, `torch.cat`,
  `to`), so it shards and merges through the same code as a dense weight (minisgl/models/weight.py),
  its scales following their groups;
- the kernel's form, what a linear layer holds once the plug-in packed it (minisgl/cpu/__init__.py)
  and the CPU kernel table multiplies (table.py): `BlockQ4Weight` (GGUF's blocks of 32 again, two
  codes per byte, for minisgl's kernel) or `PackedInt4Weight` (the tile order PyTorch's kernel reads).

The GGUF stores SmolLM2's tied embedding / LM head as Q8_0: per block of 32 inputs of a row, a
scale d = max|w| / 127 and codes round(w / d). `quantize_q8_0` applies that rule to the dequantized
weight, which gives back the very same codes and scales, so it rounds nothing new. minisgl's kernel
reads the blocks as they are (`BlockQ8Weight`); PyTorch's int8 kernel takes one scale per output
row, so `PackedInt8Weight` calls it once per block column and adds the partial results (reading the
scales in bf16). It serves the LM head's matmul; lookups keep reading the dense table.

Both forms stream 4 to 8 bits per weight instead of 32 or 16, which is what a decode step of a few
rows waits for. Above a few rows (`gemv_max_rows()`) arithmetic decides instead: minisgl's blocks
then go to its matrix-matrix kernels (a tile of weights dequantized once, then multiplied: with
fp32 FMAs in quant_gemm.c, or in bf16 on AMX tiles in amx_gemm.c where the CPU has them), which
in a decode step, whose weights come from memory rather than cache, beat oneDNN's fp32 GEMM on the
dense weights. PyTorch's int4 / int8 kernels do not, so with them (or wherever `dtype="auto"`'s
probe finds dense weights faster) batches above `max_quantized_rows` rows run from a dense copy.
"""

from __future__ import annotations

from collections.abc import Sequence
import dataclasses
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .kernels import BLOCK, cpu_kernels

KERNEL_CODE_OFFSET = 8  # the kernel reads codes 0..15 as the signed values -8..7
KERNEL_GROUP_SIZES = (32, 64, 128, 256)  # the group sizes the CPU kernel accepts
KERNEL_OUT_MULTIPLE = 16  # the kernel packs output rows in tiles of 16 (AVX2) or more
INT8_GROUP_SIZE = BLOCK  # inputs per scale of an int8 weight: Q8_0's block of 32 (PyTorch's kernel also
# needs a multiple of 16: it reads 16 inputs per aligned load on AVX-512, and other sizes crash it)
INT8_MAX_CODE = 127  # symmetric codes -127..127
# Rows up to which minisgl's matrix-vector kernels beat its matrix-matrix ones (30 SmolLM2 layers,
# weights from memory). 2 AVX2 cores against fp32 FMAs: 8 rows 40.7 vs 38.9 ms, 12 rows 53.8 vs 37.7,
# 16 rows 81.5 vs 41.5. 2 cores of an AMX Xeon against AMX tiles (medians of 7): 4 rows 17.0 vs 17.8 ms,
# 6 rows 20.3 vs 16.0, 8 rows 34.2 vs 23.3.
GEMV_MAX_ROWS = 8
GEMV_MAX_ROWS_BEFORE_TILES = 4


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
            raise ValueError(f"a shard of inputs [{start}, {start + length}) cuts through the {self.group_size}-input "
                             "quantization groups of a 4-bit weight; use --quantization none or another tp size")
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

    def to(self, *args: object, **kwargs: object) -> Int4Weight:
        """Itself: the loader's cast to the model's dtype and move to its device leave 4-bit codes as
        they are (`pack` takes the dtype; GGUF weights run on the CPU only)."""
        return self

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN206 (PyTorch's signature)
        """`torch.cat(parts)`, the loader's merge (q/k/v -> qkv_proj): the parts' rows stacked, 4-bit when
        every part is. A GGUF may store v_proj in 8 bits next to a 4-bit q_proj: the fused weight is
        then dense, in the dense part's dtype."""
        if func is not torch.cat or kwargs:
            return NotImplemented
        parts: Sequence[Int4Weight | torch.Tensor] = args[0]
        if all(isinstance(part, Int4Weight) for part in parts):
            return Int4Weight(torch.cat([p.codes for p in parts]), torch.cat([p.scale for p in parts]),
                              torch.cat([p.minimum for p in parts]), parts[0].group_size)
        dtype = next(part.dtype for part in parts if isinstance(part, torch.Tensor))
        return torch.cat([part.dequantize().to(dtype) if isinstance(part, Int4Weight) else part for part in parts])

    def dequantize(self) -> torch.Tensor:
        """The float32 weight [out, in], computed as GGUF's own dequantizer does (a multiply, then an
        add), so it equals the converted checkpoint's tensor bit for bit."""
        scale = self.scale.repeat_interleave(self.group_size, dim=1)  # [out, in]
        minimum = self.minimum.repeat_interleave(self.group_size, dim=1)
        return self.codes.float() * scale + minimum

    def pack(self, dtype: torch.dtype, max_quantized_rows: int | None, batch_invariant: bool = False) -> PackedWeight:
        """The kernel's form, plus a dense copy in `dtype` for batches above `max_quantized_rows` rows
        (None: the quantized kernel takes every batch, no dense copy): minisgl's own kernel for GGUF
        blocks of 32 where it could be built for this CPU, else PyTorch's. `batch_invariant`
        (--deterministic): minisgl's matrix-vector kernel for every batch size, never a switch of
        kernels that would make a row's result depend on its batch's size. Fails with the reason
        when the kernel cannot take this shape."""
        out_features, in_features = self.shape
        if in_features % self.group_size:
            raise ValueError(f"{in_features} inputs are not whole groups of {self.group_size}; use --quantization none")
        if cpu_kernels() is None or self.group_size != BLOCK:
            return self._pack_for_torch(dtype, max_quantized_rows)
        dense = None if max_quantized_rows is None else self.dequantize().to(dtype)
        # GGUF's block layout: per block of 32 inputs, byte j holds code j (low nibble) and 16 + j (high)
        halves = self.codes.reshape(out_features, -1, 2, BLOCK // 2)  # [out, blocks, 2, 16]
        packed = (halves[:, :, 0] | (halves[:, :, 1] << 4)).reshape(out_features, -1)  # [out, in / 2]
        return BlockQ4Weight(self.shape, dense, max_quantized_rows, packed.contiguous(),
                             self.scale.float().contiguous(), self.minimum.float().contiguous(), batch_invariant)

    def _pack_for_torch(self, dtype: torch.dtype, max_quantized_rows: int | None) -> PackedInt4Weight:
        """The layout of PyTorch's int4 CPU kernel (`_weight_int4pack_mm_for_cpu`)."""
        out_features, in_features = self.shape
        if self.group_size not in KERNEL_GROUP_SIZES:
            raise ValueError(f"the int4 CPU kernel takes groups of {KERNEL_GROUP_SIZES} inputs, "
                             f"not {self.group_size}; use --quantization none")
        if out_features % KERNEL_OUT_MULTIPLE:
            raise ValueError(f"the int4 CPU kernel needs a multiple of {KERNEL_OUT_MULTIPLE} output rows per "
                             f"rank, this shard has {out_features}; use --quantization none or another tp size")
        # PyTorch's kernel computes (code - 8) * scale + zero: zero = minimum + 8 * scale gives back W.
        zero = self.minimum + KERNEL_CODE_OFFSET * self.scale
        # [in / group, out, 2] bf16: the layout (and the precision) the kernel reads scales in
        scale_and_zero = torch.stack([self.scale.t(), zero.t()], dim=-1).to(torch.bfloat16).contiguous()
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(self.codes.to(torch.int32).contiguous(), 1)
        dense = None if max_quantized_rows is None else self.dequantize().to(dtype)
        return PackedInt4Weight(self.shape, dense, max_quantized_rows, packed, scale_and_zero, self.group_size)


@dataclass
class PackedWeight:
    """A weight in a kernel's own layout (quantized codes here, oneDNN's fp32 layout in
    prepacked.py), and the dense weight where it is needed (batches above `max_quantized_rows`
    rows; the lookups of a tied embedding)."""

    shape: torch.Size  # [out, in] of the weight it stands for
    dense: torch.Tensor | PackedWeight | None  # [out, in] in the model's dtype (fp32 may be prepacked)
    max_quantized_rows: int | None  # None: the quantized kernel takes every batch

    def matmul(self, x: torch.Tensor) -> torch.Tensor:
        """x [tokens, in] @ W.T -> [tokens, out], in x's dtype: the quantized kernels up to
        `max_quantized_rows` rows, the dense weight above. Each quantized kernel computes every row
        on its own, so within one kernel a row's result never depends on the batch around it."""
        if self.takes_dense(x.shape[0]):
            return self.dense.matmul(x) if isinstance(self.dense, PackedWeight) else F.linear(x, self.dense)
        return self._kernel(x).to(x.dtype)

    def takes_dense(self, rows: int) -> bool:
        """Whether a matmul of `rows` rows runs on the dense weight (above `max_quantized_rows`)."""
        return self.max_quantized_rows is not None and rows > self.max_quantized_rows

    def _kernel(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    @property
    def kernel_bytes(self) -> int:
        """Bytes the kernel reads per call (what a decode step of a few rows streams): every tensor
        of the kernel's form, not the dense copy."""
        fields = (getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "dense")
        return sum(value.nbytes for value in fields if isinstance(value, torch.Tensor))


@dataclass
class PackedInt4Weight(PackedWeight):
    """A 4-bit linear weight: 0.5 bytes per weight plus 4 bytes per group of scales."""

    packed: torch.Tensor  # [out, in / 2] uint8: two codes per byte, in the kernel's tile order
    scale_and_zero: torch.Tensor  # [in / group_size, out, 2] bfloat16
    group_size: int

    def _kernel(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten._weight_int4pack_mm_for_cpu(_bf16_copy(x), self.packed, self.group_size,
                                                          self.scale_and_zero)



def gemv_max_rows() -> int:
    """Rows up to which minisgl's matrix-vector kernel takes GGUF blocks on this CPU."""
    return GEMV_MAX_ROWS_BEFORE_TILES if cpu_kernels().amx_bf16 else GEMV_MAX_ROWS


def block_kernel(rows: int, batch_invariant: bool) -> str:
    """Which of minisgl's kernels multiplies `rows` rows by GGUF blocks: the matrix-vector one up
    to `gemv_max_rows()` rows (and for every batch under --deterministic, since the kernels round
    differently), above it the matrix-matrix one, on AMX tiles where the CPU has them (bf16
    products, amx_gemm.c), else with fp32 FMAs (quant_gemm.c)."""
    if rows <= gemv_max_rows() or batch_invariant:
        return "gemv"
    return "tiles" if cpu_kernels().amx_bf16 else "gemm"


@dataclass
class BlockQ4Weight(PackedWeight):
    """A 4-bit linear weight in GGUF's Q4_1 blocks, multiplied by minisgl's kernels (kernels.py):
    0.5 bytes per weight plus 8 bytes per block of 32 (an fp32 scale and minimum)."""

    codes: torch.Tensor  # [out, in / 2] uint8: per block, byte j holds code j (low nibble), 16 + j (high)
    scale: torch.Tensor  # [out, in / 32] float32
    minimum: torch.Tensor  # [out, in / 32] float32
    batch_invariant: bool  # the matrix-vector kernel for every batch (see Int4Weight.pack)

    def _kernel(self, x: torch.Tensor) -> torch.Tensor:
        return cpu_kernels().q4_1(self.codes, self.scale, self.minimum, x,
                                  kernel=block_kernel(x.shape[0], self.batch_invariant))



@dataclass
class BlockQ8Weight(PackedWeight):
    """An 8-bit weight in GGUF's Q8_0 blocks, multiplied by minisgl's kernels (kernels.py)."""

    codes: torch.Tensor  # [out, in] int8, -127..127
    scale: torch.Tensor  # [out, in / 32] float32: W[n, k] = codes[n, k] * scale[n, k // 32]
    batch_invariant: bool  # the matrix-vector kernel for every batch (see Int4Weight.pack)

    def _kernel(self, x: torch.Tensor) -> torch.Tensor:
        return cpu_kernels().q8_0(self.codes, self.scale, x,
                                  kernel=block_kernel(x.shape[0], self.batch_invariant))



@dataclass
class PackedInt8Weight(PackedWeight):
    """An 8-bit weight with one scale per group of `INT8_GROUP_SIZE` inputs of a row (GGUF's Q8_0):
    W[n, k] = codes[g, n, k - 32 g] * scale[g, n] for g = k // 32."""

    codes: torch.Tensor  # [in / 32, out, 32] int8, -127..127: one kernel call per group of inputs
    scale: torch.Tensor  # [in / 32, out] bfloat16

    def _kernel(self, x: torch.Tensor) -> torch.Tensor:
        x_bf16 = _bf16_copy(x)
        rows = x_bf16.shape[0]
        # [tokens, in] -> [in / 32, tokens, 32]: each group's activations one contiguous, aligned block
        x_groups = x_bf16.view(rows, -1, INT8_GROUP_SIZE).transpose(0, 1).contiguous()
        out = torch.zeros(rows, self.shape[0])  # [tokens, out] fp32: the groups' partial sums, in order
        for x_group, codes, scale in zip(x_groups, self.codes, self.scale):
            out += torch.ops.aten._weight_int8pack_mm(x_group, codes, scale)
        return out



def quantize_q8_0(weight: torch.Tensor, max_quantized_rows: int | None, keep_dense: bool,
                  batch_invariant: bool = False) -> PackedWeight:
    """Round `weight` [out, in] to 8 bits by Q8_0's rule (a Q8_0 weight gets its own codes back),
    for minisgl's kernels where they could be built, else PyTorch's. The dense weight is kept for
    batches above `max_quantized_rows` rows, or always with `keep_dense` (a tied embedding looks
    rows up in it); `batch_invariant` as for `Int4Weight.pack`."""
    out_features, in_features = weight.shape
    if in_features % INT8_GROUP_SIZE:
        raise ValueError(f"the int8 LM head needs whole groups of {INT8_GROUP_SIZE} inputs, "
                         f"not {in_features}; use --quantization none")
    blocks = weight.float().view(out_features, -1, INT8_GROUP_SIZE)  # [out, in / 32, 32]
    scale = blocks.abs().amax(dim=-1) / INT8_MAX_CODE  # [out, in / 32]
    divisor = torch.where(scale > 0, scale, 1.0)  # all-zero blocks (vocab padding rows) keep code 0
    codes = (blocks / divisor[..., None]).round().clamp(-INT8_MAX_CODE, INT8_MAX_CODE).to(torch.int8)
    dense = weight if keep_dense or max_quantized_rows is not None else None
    if cpu_kernels() is not None:
        return BlockQ8Weight(weight.shape, dense, max_quantized_rows, codes.view(out_features, -1), scale,
                             batch_invariant)
    # PyTorch's int8 kernel takes one scale per output row: one call per block column
    return PackedInt8Weight(weight.shape, dense, max_quantized_rows, codes.transpose(0, 1).contiguous(),
                            scale.t().to(torch.bfloat16).contiguous())


def _bf16_copy(x: torch.Tensor) -> torch.Tensor:
    """x as a fresh contiguous bf16 tensor, what PyTorch's int4 / int8 CPU kernels read: their
    vectorized paths take bf16 activations (their fp32 paths are scalar, ~10x slower), widen them and
    each weight to fp32, accumulate in fp32 and round the result to bf16, so the output carries bf16
    rounding even for fp32 x. Fresh, because they use aligned loads that a view at an offset breaks."""
    return torch.empty(x.shape, dtype=torch.bfloat16).copy_(x)


def dense_table(weight: torch.Tensor | PackedWeight) -> torch.Tensor:
    """The dense [rows, hidden] table an embedding looks rows up in (a tied 8-bit LM head keeps it,
    possibly inside the prepacked copy that serves its large batches)."""
    while isinstance(weight, PackedWeight):
        weight = weight.dense
    return weight
