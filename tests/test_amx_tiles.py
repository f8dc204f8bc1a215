"""bf16 matmuls on AMX tiles (minisgl/cpu/amx_gemm.c, minisgl/cpu/amx_tiles.py): dense weights in
tile order and GGUF's 4- and 8-bit blocks, each against the exact product of the bf16-rounded
operands within fp32 summation, for shapes that are not whole tiles, any number of rows, any
number of threads; rows computed on their own; inputs untouched; sharded at tp 3. Skipped with
the reason on CPUs without AMX (there the layers keep oneDNN and quant_gemm.c, tested elsewhere)."""

from __future__ import annotations

import os

import pytest
import torch

from minisgl import LLM, SamplingParams
from minisgl.cpu.amx_tiles import AmxTileWeight, amx_tiles_available
from minisgl.cpu.kernels import cpu_kernels
from minisgl.cpu.quantized import quantize_q8_0

from test_quantization import random_int4

pytestmark = pytest.mark.skipif(not amx_tiles_available(), reason=(
    "no AMX-BF16 here (or Linux refused the tile state): bf16 matmuls keep oneDNN, quantized ones quant_gemm.c"))

# (out, in): whole tiles; an odd number of 16-output tiles; outputs and inputs that end mid-tile;
# SmolLM2's vocabulary shard of 997 rows in the tiny models; a weight smaller than one tile
DENSE_SHAPES = [(64, 64), (48, 96), (997, 96), (33, 40), (7, 5)]
ROWS = [1, 5, 16, 17, 32, 33, 70]


def bf16(t: torch.Tensor) -> torch.Tensor:
    """t rounded to bf16 (nearest even), back in fp64 for an exact reference."""
    return t.to(torch.bfloat16).double()


def assert_bf16_product(y: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, extra_relative: float = 0.0) -> None:
    """y is x @ W.T of the bf16-rounded operands, summed in fp32: each of its `in` additions and the
    products' rounding moves a sum by at most 2^-24 of the sum of |products| (plus one for luck),
    and `extra_relative` of that sum more where the weights themselves may differ slightly."""
    exact = bf16(x) @ bf16(weight).T
    bound = (bf16(x).abs() @ bf16(weight).abs().T) * ((x.shape[1] + 2) * 2.0**-24 + extra_relative)
    assert y.dtype == torch.float32 and y.shape == exact.shape
    assert ((y.double() - exact).abs() <= bound).all(), ((y.double() - exact).abs() / bound).max().item()


def test_tile_order_is_the_one_amx_loads() -> None:
    weight = torch.randn(33, 40)
    tiles = AmxTileWeight.from_dense(weight, keep_dense=False).tiles
    assert tiles.shape == (3, 2, 16, 32) and tiles.dtype == torch.bfloat16  # padded to 48 x 64
    for n, k in [(0, 0), (1, 0), (0, 1), (17, 3), (32, 39), (5, 33)]:
        nb, kb, p, e = n // 16, k // 32, (k % 32) // 2, k % 2
        assert tiles[nb, kb, p, 2 * (n % 16) + e] == weight[n, k].to(torch.bfloat16)
    assert tiles[2, :, :, 2:].eq(0).all() and tiles[:, 1, 4:, :].eq(0).all()  # the padding: zeros


@pytest.mark.parametrize("shape", DENSE_SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_dense_tiles_give_the_product_of_bf16_rounded_operands(shape: tuple[int, int]) -> None:
    generator = torch.Generator().manual_seed(shape[0])
    weight = torch.randn(shape, generator=generator)
    packed = AmxTileWeight.from_dense(weight, keep_dense=False)
    for rows in ROWS:
        x = torch.randn(rows, shape[1], generator=generator) * 3
        before = x.clone()
        assert_bf16_product(packed.matmul(x), x, weight)
        assert torch.equal(x, before)  # read, never written


@pytest.mark.parametrize("kind", ["q4_1", "q8_0"])
@pytest.mark.parametrize("out", [64, 50, 17], ids=lambda o: f"out{o}")
def test_gguf_blocks_on_tiles_give_the_product_of_bf16_rounded_operands(kind: str, out: int) -> None:
    kernels = cpu_kernels()
    weight = random_int4(out, 96, seed=out)
    dense = weight.dequantize()  # [out, 96] fp32: GGUF's own d * q + m
    q4, q8 = weight.pack(torch.float32, None), quantize_q8_0(dense, None, keep_dense=False)
    for rows in [9, 16, 32, 33, 70]:
        x = torch.randn(rows, 96, generator=torch.Generator().manual_seed(rows))
        before = x.clone()
        if kind == "q4_1":
            y = kernels.q4_1(q4.codes, q4.scale, q4.minimum, x, kernel="tiles")
            reference = dense
        else:
            y = kernels.q8_0(q8.codes, q8.scale, x, kernel="tiles")
            reference = q8.codes.float() * q8.scale.repeat_interleave(32, dim=1)
        # the kernel dequantizes with one FMA where GGUF multiplies then adds: a weight may differ in
        # its last fp32 bit, which bf16 rounding hides except at a tie; allow one bf16 step on top
        assert_bf16_product(y, x, reference, extra_relative=2.0**-8)
        assert torch.equal(x, before)


def test_a_row_gets_the_same_bits_alone_or_in_any_batch() -> None:
    kernels = cpu_kernels()
    dense = AmxTileWeight.from_dense(torch.randn(80, 96), keep_dense=False)
    packed = random_int4(80, 96, seed=1).pack(torch.float32, None)
    x = torch.randn(70, 96)
    batched_dense = dense.matmul(x)
    batched_q4 = kernels.q4_1(packed.codes, packed.scale, packed.minimum, x, kernel="tiles")
    for i in (0, 15, 16, 31, 32, 69):  # first / last of a 16-row tile, of a 32-row block, the partial tail
        assert torch.equal(dense.matmul(x[i : i + 1])[0], batched_dense[i]), i
        alone = kernels.q4_1(packed.codes, packed.scale, packed.minimum, x[i : i + 1], kernel="tiles")
        assert torch.equal(alone[0], batched_q4[i]), i


def test_threads_split_the_outputs_not_the_sums() -> None:
    kernels = cpu_kernels()
    dense = AmxTileWeight.from_dense(torch.randn(100, 64), keep_dense=False)
    packed = random_int4(100, 64, seed=2).pack(torch.float32, None)
    x = torch.randn(40, 64)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = dense.matmul(x), kernels.q4_1(packed.codes, packed.scale, packed.minimum, x, kernel="tiles")
        torch.set_num_threads(max(3, os.cpu_count() or 3))  # more threads than some calls have strips
        many = dense.matmul(x), kernels.q4_1(packed.codes, packed.scale, packed.minimum, x, kernel="tiles")
    finally:
        torch.set_num_threads(before)
    assert torch.equal(one[0], many[0]) and torch.equal(one[1], many[1])


def test_inputs_the_tiles_cannot_take_are_refused() -> None:
    dense = AmxTileWeight.from_dense(torch.randn(32, 64), keep_dense=False)
    with pytest.raises(ValueError, match="x has 60 inputs per row, the weight 64"):
        dense.matmul(torch.randn(3, 60))
    with pytest.raises(ValueError, match=r"\[rows, in\] CPU tensors"):
        dense.matmul(torch.randn(2, 3, 64))


def test_sharded_tiles_give_tp_3_the_tokens_of_tp_1(tiny_model_dir) -> None:
    # Each rank tiles its own shard (a 997-row vocabulary splits into 333 / 332 / 332 rows: partial
    # tiles). bf16 rounds the same values at tp 1 and 3; only fp32 sums are split (the row-parallel
    # all-reduce), far below these tiny models' gaps between the top tokens.
    prompts = [[1, 5, 9, 200, 17], [1, 300, 301, 302, 9, 9, 9, 40], [1, 77]]
    greedy = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
    tokens = {}
    for tp in (1, 3):
        with LLM(tiny_model_dir("llama-tied"), tp_size=tp, dtype="float32", matmul_dtype="bfloat16",
                 quantization="none", cpu_threads=1, num_pages=256, progress=False) as llm:
            tokens[tp] = [o.token_ids for o in llm.generate(prompts, greedy)]
    assert tokens[3] == tokens[1] and all(len(t) == 6 for t in tokens[1])
