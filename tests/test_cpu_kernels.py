"""minisgl's compiled CPU kernels (minisgl/cpu/kernels.py): the build and its cache, the portable C
path against the AVX2 one (matrix-vector and matrix-matrix), what happens without a compiler, and the fused elementwise and
decode-attention functions against the torch code they replace. The quantized products against
their dequantized weights are tested in tests/test_quantization.py."""

from __future__ import annotations

import ctypes
import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from minisgl.cpu import kernels as cpu
from minisgl.cpu.kernels import CpuKernels, build_library, cpu_kernels
from minisgl.cpu.table import CpuKernelTable
from minisgl.layers import install_kernels
from minisgl.layers.kernels import rotate_half
from minisgl.layers.norm import RMSNorm
from minisgl.layers.rotary import RotaryEmbedding

HAS_COMPILER = cpu_kernels() is not None
needs_compiler = pytest.mark.skipif(not HAS_COMPILER, reason="no working C compiler here: the kernels cannot be built")


@pytest.fixture
def fresh_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """An empty minisgl cache dir, and `cpu_kernels()` asked again (it remembers its first answer)."""
    monkeypatch.setenv("MINISGL_CACHE_DIR", str(tmp_path))
    cpu_kernels.cache_clear()
    yield tmp_path
    cpu_kernels.cache_clear()


def fake_compiler(tmp_path: Path, message: str) -> str:
    """An executable that prints `message` and fails, as a compiler without what we need would."""
    script = tmp_path / "broken-cc"
    script.write_text(f"#!/bin/sh\necho '{message}' >&2\nexit 1\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


def random_q4(out_features: int, in_features: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    codes = torch.randint(0, 256, (out_features, in_features // 2), generator=generator, dtype=torch.uint8)
    scale = torch.rand(out_features, in_features // 32, generator=generator) * 0.02
    minimum = -torch.rand(out_features, in_features // 32, generator=generator) * 0.1
    return codes, scale, minimum


@needs_compiler
def test_the_build_is_cached_and_keyed_by_its_flags(fresh_cache: Path) -> None:
    first = build_library()
    built_at = first.stat().st_mtime_ns
    assert build_library() == first and first.stat().st_mtime_ns == built_at  # reused, not rebuilt
    other = build_library(extra_flags=("-O2",))
    assert other != first and other.parent == fresh_cache / "kernels"
    assert not list(first.parent.glob("*.tmp"))  # the scratch file was renamed into place


@pytest.mark.skipif(not HAS_COMPILER or "avx2" not in cpu.cpu_flags(), reason="needs a compiler and an AVX2 CPU")
def test_the_portable_path_computes_what_the_avx2_path_does(fresh_cache: Path) -> None:
    avx2 = CpuKernels(ctypes.CDLL(str(build_library())))
    portable = CpuKernels(ctypes.CDLL(str(build_library(extra_flags=("-mno-avx2",)))))
    for rows in (1, 2, 5, 8, 11):  # every specialized row count of a pass, and a second pass
        codes, scale, minimum = random_q4(33, 96, seed=rows)  # an odd number of output rows: one unpaired
        x = torch.randn(rows, 96, generator=torch.Generator().manual_seed(7))
        # the same integer products, summed in another order in fp32
        torch.testing.assert_close(portable.q4_1(codes, scale, minimum, x), avx2.q4_1(codes, scale, minimum, x),
                                   rtol=1e-5, atol=1e-5)
        codes8 = torch.randint(-127, 128, (33, 96), dtype=torch.int8)
        torch.testing.assert_close(portable.q8_0(codes8, scale, x), avx2.q8_0(codes8, scale, x), rtol=1e-5,
                                   atol=1e-4)
    for rows in (9, 16, 17, 40):  # the matrix-matrix kernels: one panel of 16 rows, a partial one, several
        codes, scale, minimum = random_q4(33, 96, seed=rows)  # 33 outputs: five tiles of 6 weight rows and one of 3
        x = torch.randn(rows, 96, generator=torch.Generator().manual_seed(8))
        torch.testing.assert_close(portable.q4_1(codes, scale, minimum, x, kernel="gemm"),
                                   avx2.q4_1(codes, scale, minimum, x, kernel="gemm"), rtol=1e-5, atol=1e-5)
        codes8 = torch.randint(-127, 128, (33, 96), dtype=torch.int8)
        torch.testing.assert_close(portable.q8_0(codes8, scale, x, kernel="gemm"),
                                   avx2.q8_0(codes8, scale, x, kernel="gemm"), rtol=1e-5, atol=1e-4)
    cases = argmax_cases()
    assert torch.equal(portable.argmax_rows(cases), avx2.argmax_rows(cases))  # both torch.argmax's picks
    generator = torch.Generator().manual_seed(9)
    for cache_dtype in (torch.float32, torch.bfloat16):  # decode attention over a 21-key request, 3 KV heads of 64
        generator = torch.Generator().manual_seed(9)
        k_cache, v_cache = (torch.randn(24, 3, 64, generator=generator).to(cache_dtype) for _ in range(2))
        q, k, v = (torch.randn(1, heads, 64, generator=generator) for heads in (9, 3, 3))
        slots = torch.randperm(24, generator=generator)[:21].unsqueeze(0)
        new_slot, lengths = slots[:, -1].clone(), torch.tensor([21])
        torch.testing.assert_close(
            portable.decode_attention(q, k, v, new_slot, k_cache.clone(), v_cache.clone(), slots, lengths, 0.125),
            avx2.decode_attention(q, k, v, new_slot, k_cache.clone(), v_cache.clone(), slots, lengths, 0.125),
            rtol=1e-5, atol=1e-5)


def test_no_compiler_is_a_clear_error_and_a_logged_fallback(fresh_cache: Path, monkeypatch: pytest.MonkeyPatch,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(RuntimeError, match="no C compiler 'no-such-cc' on PATH"):
        build_library("no-such-cc")
    monkeypatch.setenv("CC", "no-such-cc")
    with caplog.at_level(logging.WARNING, logger=cpu.__name__):
        assert cpu_kernels() is None
    assert "PyTorch's slower int4 / int8 kernels" in caplog.text and "no-such-cc" in caplog.text


def test_a_failing_compiler_names_its_first_error(fresh_cache: Path, tmp_path: Path) -> None:
    compiler = fake_compiler(tmp_path, "quant_gemv.c:1: error: unknown target CPU")
    with pytest.raises(RuntimeError, match="could not build minisgl.s C kernels: quant_gemv.c:1: error: unknown target CPU"):
        build_library(compiler)
    assert not list((fresh_cache / "kernels").glob("*.so"))  # nothing half-built is left to be loaded


@needs_compiler
def test_inputs_the_kernels_cannot_take_are_refused() -> None:
    kernels = cpu_kernels()
    codes, scale, minimum = random_q4(16, 64, seed=0)
    with pytest.raises(ValueError, match=r"\[rows, in\] CPU tensors"):
        kernels.q4_1(codes, scale, minimum, torch.randn(2, 1, 64))


@needs_compiler
def test_asking_for_amx_tiles_where_there_are_none_is_an_error_not_an_abort(monkeypatch: pytest.MonkeyPatch) -> None:
    kernels = cpu_kernels()
    monkeypatch.setattr(kernels, "amx_bf16", False)  # what a build for a CPU without AMX says
    codes, scale, minimum = random_q4(32, 64, seed=3)
    with pytest.raises(RuntimeError, match="no AMX-BF16 tiles"):
        kernels.q4_1(codes, scale, minimum, torch.randn(9, 64), kernel="tiles")
    with pytest.raises(RuntimeError, match="no AMX-BF16 tiles"):
        kernels.q8_0(torch.zeros(32, 64, dtype=torch.int8), scale, torch.randn(9, 64), kernel="tiles")
    with pytest.raises(RuntimeError, match="no AMX-BF16 tiles"):
        kernels.bf16_tiles(torch.zeros(2, 2, 16, 32, dtype=torch.bfloat16), torch.randn(3, 64), 32, 64)


@needs_compiler
def test_more_rows_than_one_call_takes_are_done_in_chunks() -> None:
    kernels = cpu_kernels()
    codes, scale, minimum = random_q4(24, 64, seed=3)
    x = torch.randn(8 * 2 + 3, 64)  # the kernels take 8 rows per pass over the weights (MAX_ROWS)
    whole = kernels.q4_1(codes, scale, minimum, x)
    by_chunk = torch.cat([kernels.q4_1(codes, scale, minimum, x[i:i + 3]) for i in range(0, x.shape[0], 3)])
    assert whole.shape == (x.shape[0], 24)
    assert torch.equal(whole, by_chunk)  # each row is computed on its own, whatever the chunking


@needs_compiler
def test_the_kernels_use_the_threads_torch_is_given() -> None:
    kernels = cpu_kernels()
    codes, scale, minimum = random_q4(64, 128, seed=4)
    x = torch.randn(3, 128)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = kernels.q4_1(codes, scale, minimum, x)
        one_gemm = kernels.q4_1(codes, scale, minimum, x, kernel="gemm")
        torch.set_num_threads(max(2, os.cpu_count() or 2))
        assert torch.equal(kernels.q4_1(codes, scale, minimum, x), one)  # rows split over threads, same sums
        assert torch.equal(kernels.q4_1(codes, scale, minimum, x, kernel="gemm"), one_gemm)  # tiles split, same sums
    finally:
        torch.set_num_threads(before)


# --- fused.c: the layers' elementwise work and decode attention, against the torch code ----------


@needs_compiler
@pytest.mark.parametrize("rows", [1, 5, 33])  # 33: more rows than one thread takes alone
def test_rms_norm_with_and_without_the_residual_is_the_torch_norm(rows: int) -> None:
    kernels = cpu_kernels()
    generator = torch.Generator().manual_seed(rows)
    weight = torch.randn(96, generator=generator)
    wide = torch.randn(rows, 160, generator=generator)
    x, residual = wide[:, :96], torch.randn(rows, 96, generator=generator)  # x a strided view, as qkv slices are
    x_before = x.clone()
    normed, summed = kernels.rms_norm(x, weight, 1e-6, residual)
    torch.testing.assert_close(summed, x + residual, rtol=0, atol=0)
    torch.testing.assert_close(normed, F.rms_norm(x + residual, (96,), None, 1e-6) * weight, rtol=1e-5, atol=1e-6)
    alone, nothing = kernels.rms_norm(x, weight, 1e-6)
    assert nothing is None
    torch.testing.assert_close(alone, F.rms_norm(x, (96,), None, 1e-6) * weight, rtol=1e-5, atol=1e-6)
    assert torch.equal(x, x_before)  # inputs untouched


@needs_compiler
def test_rms_norm_of_each_head_keeps_the_heads_shape() -> None:
    # Qwen3's q / k norms normalise each head of a [tokens, heads, d] view into qkv
    qkv = torch.randn(4, 3 * 2 * 8)
    q = qkv[:, :16].view(4, 2, 8)
    weight = torch.randn(8)
    normed, _ = cpu_kernels().rms_norm(q, weight, 1e-6)
    assert normed.shape == (4, 2, 8)
    torch.testing.assert_close(normed, F.rms_norm(q, (8,), None, 1e-6) * weight, rtol=1e-5, atol=1e-6)


@needs_compiler
@pytest.mark.parametrize("tokens", [1, 3, 20])
def test_rope_rotates_q_and_k_as_the_torch_code_does(tokens: int) -> None:
    rotary = RotaryEmbedding(head_dim=16, max_position=64, base=10000.0, scaling=None)
    generator = torch.Generator().manual_seed(tokens)
    qkv = torch.randn(tokens, (3 + 2 * 1) * 16, generator=generator)
    q, k = qkv[:, :48].view(tokens, 3, 16), qkv[:, 48:64].view(tokens, 1, 16)  # views, as the layer passes them
    positions = torch.randint(0, 64, (tokens,), generator=generator)
    table = rotary.cos_sin(torch.device("cpu"), torch.float32)
    got_q, got_k = cpu_kernels().rope(positions, q, k, table)
    cos, sin = table[positions].unsqueeze(1).chunk(2, dim=-1)
    torch.testing.assert_close(got_q, rotate_half(q, cos, sin), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(got_k, rotate_half(k, cos, sin), rtol=1e-6, atol=1e-6)


@needs_compiler
@pytest.mark.parametrize("rows", [1, 17])
@pytest.mark.parametrize("spread", [4.0, 120.0], ids=["normal", "beyond-exp-range"])
def test_silu_and_mul_is_silu_of_gate_times_up(rows: int, spread: float) -> None:
    # 43 values per half: five groups of 8 for the vector exp and a tail of 3 for libm's; a spread of
    # 120 reaches past where e^x is a normal float (the kernel clamps exp's input to [-87, 88])
    gate_up = torch.randn(rows, 2 * 43) * spread
    gate_up[0, 5] = float("nan")  # a NaN stays NaN, in the vector body as in torch
    gate, up = gate_up.chunk(2, dim=-1)
    torch.testing.assert_close(cpu_kernels().silu_and_mul(gate_up), F.silu(gate) * up, rtol=1e-5, atol=1e-6,
                               equal_nan=True)


# (q_heads, kv_heads, head_dim): with AVX2, scores take four keys at a time where head_dim is a
# multiple of 8 and values 32 floats at a time where it is a multiple of 32; the rest is portable C.
# The cache holds fp32, or bf16 (--kv-cache-dtype bfloat16): stored rounded as torch rounds, read widened.
@pytest.mark.parametrize("heads", [(6, 2, 16), (9, 3, 64), (8, 8, 128), (4, 1, 40), (2, 1, 12)])
@pytest.mark.parametrize("cache_dtype", [torch.float32, torch.bfloat16])
@needs_compiler
def test_decode_attention_stores_the_new_rows_then_reads_each_requests_own(heads: tuple[int, int, int],
                                                                          cache_dtype: torch.dtype) -> None:
    generator = torch.Generator().manual_seed(5)
    q_heads, kv_heads, head_dim = heads
    cache_slots = 64
    lengths = [1, 7, 30]  # a request that sees only itself, and longer ones (7, 30: four keys at a time and a tail)
    k_cache = torch.randn(cache_slots, kv_heads, head_dim, generator=generator).to(cache_dtype)
    v_cache = torch.randn(cache_slots, kv_heads, head_dim, generator=generator).to(cache_dtype)
    order = torch.randperm(cache_slots, generator=generator)  # pages scattered over the cache
    slots = torch.zeros(len(lengths), max(lengths), dtype=torch.int64)
    used = 0
    for i, length in enumerate(lengths):
        slots[i, :length] = order[used:used + length]
        used += length
    new_slots = torch.stack([slots[i, length - 1] for i, length in enumerate(lengths)])  # each request's newest
    qkv = torch.randn(len(lengths), (q_heads + 2 * kv_heads) * head_dim, generator=generator)
    q, k, v = qkv.split([q_heads * head_dim, kv_heads * head_dim, kv_heads * head_dim], dim=-1)
    q, k, v = (t.view(len(lengths), -1, head_dim) for t in (q, k, v))  # views into qkv, as the layer passes them
    untouched = torch.ones(cache_slots, dtype=torch.bool)
    untouched[new_slots] = False
    k_before, v_before, qkv_before = k_cache.clone(), v_cache.clone(), qkv.clone()
    got = cpu_kernels().decode_attention(q, k, v, new_slots, k_cache, v_cache, slots, torch.tensor(lengths),
                                         head_dim**-0.5)
    assert got.dtype == torch.float32 and torch.equal(qkv, qkv_before)
    assert torch.equal(k_cache[new_slots], k.to(cache_dtype)) and torch.equal(v_cache[new_slots], v.to(cache_dtype))
    assert torch.equal(k_cache[untouched], k_before[untouched]) and torch.equal(v_cache[untouched], v_before[untouched])
    for i, length in enumerate(lengths):
        # [length, q_heads, d]: the cached values as fp32 (a bf16 widens exactly), the sums in fp32 as the kernel's
        keys = k_cache[slots[i, :length]].float().repeat_interleave(q_heads // kv_heads, dim=1)
        values = v_cache[slots[i, :length]].float().repeat_interleave(q_heads // kv_heads, dim=1)
        expected = F.scaled_dot_product_attention(q[i].unsqueeze(1), keys.transpose(0, 1), values.transpose(0, 1))
        torch.testing.assert_close(got[i], expected.squeeze(1), rtol=1e-5, atol=1e-5)


@needs_compiler
def test_a_bf16_cache_stores_what_torch_rounds_to() -> None:
    # ties to even both ways, the largest values below a carry into the exponent, inf, a subnormal,
    # and values whose rounding overflows to inf: bit for bit torch's float -> bfloat16. A NaN stays
    # a NaN (its bits differ between torch's own conversion kernels: 0x7FC0 scalar, 0xFFFF vectorized)
    specials = torch.tensor([1.0 + 2**-8, 1.0 + 3 * 2**-8, -(1.0 + 2**-8), 1.0 - 2**-25, 3.4e38, float("inf"),
                             float("-inf"), float("nan"), 1e-40, -0.0, 0.1, 65504.0, 3.3961e38, 1.0, 2.0, -2.5])
    k = specials.view(1, 1, 16)
    v = -specials.flip(0).view(1, 1, 16)
    k_cache, v_cache = torch.zeros(2, 1, 16, dtype=torch.bfloat16), torch.zeros(2, 1, 16, dtype=torch.bfloat16)
    cpu_kernels().decode_attention(torch.zeros(1, 1, 16), k, v, torch.tensor([1]), k_cache, v_cache,
                                   torch.tensor([[1]]), torch.tensor([1]), 0.25)
    for stored, row in ((k_cache[1, 0], k[0, 0]), (v_cache[1, 0], v[0, 0])):
        numbers = ~row.isnan()
        assert torch.equal(stored[numbers].view(torch.int16), row[numbers].to(torch.bfloat16).view(torch.int16))
        assert stored[~numbers].isnan().all()


@needs_compiler
def test_decode_attention_refuses_other_cache_dtypes() -> None:
    cache = torch.zeros(2, 1, 8, dtype=torch.float16)
    with pytest.raises(ValueError, match="fp32 or bf16 caches"):
        cpu_kernels().decode_attention(torch.zeros(1, 1, 8), torch.zeros(1, 1, 8), torch.zeros(1, 1, 8),
                                       torch.tensor([0]), cache, cache, torch.tensor([[0]]), torch.tensor([1]), 1.0)


def test_decode_attention_keeps_a_nan_where_torch_does() -> None:
    # A NaN key of KV head 0 makes softmax NaN for the query heads reading it, as in torch; the
    # other KV head's query heads stay finite (20 keys: the vector exp's body and its tail).
    q_heads, kv_heads, head_dim, length = 4, 2, 16, 20
    k_cache, v_cache = torch.randn(length, kv_heads, head_dim), torch.randn(length, kv_heads, head_dim)
    k_cache[3, 0, 5] = float("nan")
    q, k, v = torch.randn(1, q_heads, head_dim), k_cache[-1:].clone(), v_cache[-1:].clone()
    slots = torch.arange(length).unsqueeze(0)
    got = cpu_kernels().decode_attention(q, k, v, torch.tensor([length - 1]), k_cache, v_cache, slots,
                                         torch.tensor([length]), head_dim**-0.5)
    assert got[0, :2].isnan().all() and not got[0, 2:].isnan().any()


def argmax_cases() -> torch.Tensor:
    """Rows argmax must get right: random (one 8-wide tail of 5), a tie (the first wins), a NaN
    (wins, as in torch), +inf, all -inf, a NaN in the vector body and one in the tail."""
    rows = torch.randn(8, 45, generator=torch.Generator().manual_seed(9))
    rows[1, 7] = rows[1, 30] = 50.0
    rows[2, 12] = float("nan")
    rows[3, 3] = float("inf")
    rows[4] = float("-inf")
    rows[5, 8], rows[5, 44] = float("nan"), float("nan")
    rows[6, 43] = float("nan")
    return rows


@needs_compiler
def test_argmax_rows_picks_what_torch_argmax_picks() -> None:
    kernels = cpu_kernels()
    cases = argmax_cases()
    assert torch.equal(kernels.argmax_rows(cases), torch.argmax(cases, dim=-1))
    wide = torch.randn(33, 49_152 + 16)[:, :49_152]  # SmolLM2's vocabulary, rows with a stride
    before = wide.clone()
    picks = kernels.argmax_rows(wide)
    assert picks.dtype == torch.int64 and torch.equal(picks, torch.argmax(wide, dim=-1))
    assert torch.equal(wide, before)


def test_the_cpu_table_computes_the_torch_norm_with_or_without_the_kernels() -> None:
    norm = RMSNorm(32, 1e-6)
    norm.weight = torch.randn(32)
    x, residual = torch.randn(3, 32), torch.randn(3, 32)
    reference = norm.forward_with_residual(x, residual)  # no plug-in installed: the torch reference
    for kernels in (cpu_kernels(), None):  # None: a machine without a C compiler
        install_kernels("cpu", CpuKernelTable(kernels, batch_invariant=False))
        try:
            normed, summed = norm.forward_with_residual(x, residual)
        finally:
            install_kernels("cpu", None)
        torch.testing.assert_close(normed, reference[0], rtol=1e-5, atol=1e-6)
        assert torch.equal(summed, reference[1])
    assert not cpu.use_cpu_kernels(x.bfloat16())  # bf16 always takes the torch code
