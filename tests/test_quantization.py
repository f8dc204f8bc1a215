"""GGUF weights on the CPU: the 4-bit and 8-bit kernels (minisgl's own, and PyTorch's fallback)
against their dequantized weights, the GGUF reader against the converted checkpoint, quantized
shards at tp 1 and 3, and `auto`'s speed probe. tests/test_cpu_kernels.py tests the compiled
kernels themselves (builds, portable path, errors)."""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from gguf import GGMLQuantizationType, GGUFReader
from safetensors import safe_open

from minisgl import LLM, SamplingParams
from minisgl.core import Req, forward_context
from minisgl.engine import precision
from minisgl.config import EngineConfig
from minisgl.engine.engine import Engine
from minisgl.engine.precision import ProbeResult, choose_precision, resolve_precision
from minisgl.layers import quantized
from minisgl.layers.prepacked import bf16_prepacking_available
from minisgl.layers.quantized import (BlockQ4Weight, BlockQ8Weight, Int4Weight, PackedInt4Weight, PackedInt8Weight,
                                      PackedWeight, quantize_q8_0)
from minisgl.models.config import ModelConfig, ModelError
from minisgl.models.gguf_weights import iter_gguf_tensors
from minisgl.models.weight import shard_and_merge, shard_tensor
from minisgl.scheduler.batch import make_prefill_batch
from minisgl.testing.tiny_gguf import make_tiny_gguf_model
from minisgl.testing.tiny_models import TINY_MODEL_SPECS

BF16_UNIT_ROUNDOFF = 2.0**-8  # bf16 keeps 8 significant bits
FP32_SLOP = 2.0**-18  # fp32 accumulation over a few hundred terms, relative to sum |x w|
TINY = "llama-tied"  # tied Q8_0 embedding and 6 heads / 3 KV heads, like SmolLM2; valid at tp 1 and 3


@pytest.fixture(scope="module")
def gguf_model(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("tiny-gguf")
    return lambda qtype: make_tiny_gguf_model(TINY, root / qtype.name, qtype)


def tiny_config() -> ModelConfig:
    return ModelConfig.from_dict({**TINY_MODEL_SPECS[TINY].config.to_dict(), "architectures": ["LlamaForCausalLM"]})


def random_int4(out_features: int, in_features: int, group_size: int = 32, seed: int = 0) -> Int4Weight:
    generator = torch.Generator().manual_seed(seed)
    groups = in_features // group_size
    codes = torch.randint(0, 16, (out_features, in_features), generator=generator, dtype=torch.uint8)
    scale = torch.rand(out_features, groups, generator=generator) * 0.02 + 0.001
    minimum = -8 * scale + 0.01 * torch.randn(out_features, groups, generator=generator)  # roughly centred
    return Int4Weight(codes, scale, minimum, group_size)


@pytest.fixture(params=["minisgl", "torch"])
def kernels(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Which kernels the quantized weights get: minisgl's compiled ones, or PyTorch's (the fallback
    of a machine without a C compiler)."""
    if request.param == "minisgl" and quantized.cpu_kernels() is None:
        pytest.skip("minisgl's CPU kernels could not be built here (no C compiler?): the log says why")
    if request.param == "torch":
        monkeypatch.setattr(quantized, "cpu_kernels", lambda: None)
    return request.param


def int16_activation_bound(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """|x @ W.T - y| allowed for minisgl's kernels [rows, out]: each block of 32 activations is
    rounded to 16-bit codes of step amax / 32767, so each activation moves by at most half a step;
    the weights are the blocks' exact values; fp32 accumulation adds a little."""
    x, weight = x.double(), weight.double()
    half_step = x.abs().view(x.shape[0], -1, 32).amax(-1) / (2 * 32767)  # [rows, in / 32]
    moved = half_step.repeat_interleave(32, dim=1)  # [rows, in]
    return (moved @ weight.abs().T) * 1.01 + FP32_SLOP * (x.abs() @ weight.abs().T)


def test_each_kernel_family_gets_its_own_layout(kernels: str) -> None:
    int4 = random_int4(96, 256).pack(torch.float32, None)
    int8 = quantize_q8_0(torch.randn(40, 64), None, keep_dense=False)
    expected = (BlockQ4Weight, BlockQ8Weight) if kernels == "minisgl" else (PackedInt4Weight, PackedInt8Weight)
    assert (type(int4), type(int8)) == expected


def matrix_kernel_bound(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """|x @ W.T - y| allowed for minisgl's matrix-matrix kernels [rows, out]: each weight dequantized
    with one rounding, and a sum of `in` products in fp32 (at most `in` + 2 roundings of unit 2^-24
    on sum |x w|); on AMX tiles the activations and the dequantized weights are also rounded to
    bf16, moving each product by at most 2u + u^2 of |x w| (u = bf16's unit roundoff)."""
    magnitude = x.double().abs() @ weight.double().abs().T
    bf16_products = (2 + BF16_UNIT_ROUNDOFF) * BF16_UNIT_ROUNDOFF if quantized.cpu_kernels().amx_bf16 else 0.0
    return ((x.shape[1] + 2) * 2.0**-24 + bf16_products) * magnitude


# the matrix-vector kernel (up to 4 rows with AMX, else 8), then the matrix-matrix one
@pytest.mark.parametrize("rows", [3, 5, 9, 37])
@pytest.mark.parametrize("group_size", [32, 64])
def test_int4_matmul_is_the_dequantized_matmul_within_its_rounding(kernels: str, group_size: int, rows: int) -> None:
    if kernels == "minisgl" and group_size != 32:
        pytest.skip("minisgl's kernel reads GGUF blocks of 32; other group sizes take PyTorch's")
    # minisgl's: 97 outputs, a partial tile of weight rows in its matrix-matrix kernel; PyTorch's takes multiples of 16
    weight = random_int4(97 if kernels == "minisgl" else 96, 256, group_size)
    x = torch.randn(rows, 256, generator=torch.Generator().manual_seed(1))
    got = weight.pack(torch.float32, None).matmul(x)
    reference = x.double() @ weight.dequantize().double().T
    if kernels == "minisgl" and rows > quantized.gemv_max_rows():
        bound = matrix_kernel_bound(x, weight.dequantize())
    elif kernels == "minisgl":
        bound = int16_activation_bound(x, weight.dequantize())
    else:
        # PyTorch's kernel rounds x, the scale and the zero (minimum + 8 * scale) to bf16, accumulates
        # in fp32 and rounds the output to bf16: each weight is off by at most u * (|code - 8| * scale +
        # |zero|), each activation by u * |x|, the sum by u * |y| (u = bf16's unit roundoff).
        scale = weight.scale.repeat_interleave(group_size, 1).double()
        zero = (weight.minimum + 8 * weight.scale).repeat_interleave(group_size, 1).double()
        weight_error = (weight.codes.double() - 8).abs() * scale + zero.abs()
        term_bound = x.double().abs() @ (weight.dequantize().double().abs() + weight_error).T
        bound = BF16_UNIT_ROUNDOFF * (term_bound + reference.abs()) * 1.01 + 256 * 2.0**-24 * term_bound
    error = (got.double() - reference).abs()
    assert (error <= bound).all(), f"worst excess {(error - bound).max().item():.3g}"
    assert got.dtype == torch.float32


def q8_0_values(packed: PackedWeight) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(codes [out, in], per-weight step [out, in], the weight codes * step) of either 8-bit form."""
    out_features, in_features = packed.shape
    if isinstance(packed, BlockQ8Weight):
        codes, scale = packed.codes, packed.scale.double()  # [out, in], [out, in / 32]
    else:
        codes = packed.codes.permute(1, 0, 2).reshape(out_features, in_features)  # from [in / 32, out, 32]
        scale = packed.scale.double().T
    step = scale.repeat_interleave(32, dim=1)
    return codes, step, codes.double() * step


def test_int8_head_is_its_q8_0_weight_within_its_rounding(kernels: str) -> None:
    generator = torch.Generator().manual_seed(2)
    weight = torch.randn(97, 64, generator=generator) * torch.rand(97, 1, generator=generator)  # rows of varied size
    weight[5] = 0  # a vocab padding row
    packed = quantize_q8_0(weight, max_quantized_rows=None, keep_dense=False)
    _, step, values = q8_0_values(packed)  # the weight the kernel multiplies by
    # half a step to the nearest code, plus (PyTorch's form) the bf16 scale's rounding times codes up to 127
    scale_rounding = 0 if kernels == "minisgl" else 127 * BF16_UNIT_ROUNDOFF
    assert ((values - weight.double()).abs() <= (0.5 + scale_rounding) * 1.01 * step).all()
    assert packed.dense is None
    for rows in (3, 6, 19):  # the matrix-vector kernel, then (minisgl) the matrix-matrix one (from 5 or 9 rows)
        x = torch.randn(rows, 64, generator=generator)
        got, reference = packed.matmul(x).double(), x.double() @ values.T
        if kernels == "minisgl" and rows > quantized.gemv_max_rows():
            bound = matrix_kernel_bound(x, values)
        elif kernels == "minisgl":
            bound = int16_activation_bound(x, values)
        else:  # bf16 activations (u |x| per term) and each group's bf16 output (u |partial|): at most 2u sum |x w|
            bound = 2 * BF16_UNIT_ROUNDOFF * (x.double().abs() @ values.abs().T) * 1.01
        assert ((got - reference).abs() <= bound).all(), rows
    with pytest.raises(ValueError, match="whole groups of 32 inputs"):
        quantize_q8_0(torch.randn(8, 48), None, keep_dense=False)


def test_int8_head_gets_back_the_gguf_q8_0_codes(kernels: str, gguf_model) -> None:
    model_dir = gguf_model(GGMLQuantizationType.Q4_1)
    (stored,) = [t for t in GGUFReader(model_dir / "model.gguf").tensors if t.name == "token_embd.weight"]
    assert stored.tensor_type == GGMLQuantizationType.Q8_0
    out_features, in_features = (int(d) for d in reversed(stored.shape))
    blocks = np.asarray(stored.data).reshape(out_features, in_features // 32, 34)  # fp16 d, then 32 int8 codes
    scale = torch.from_numpy(blocks[..., :2].copy().view(np.float16)[..., 0].astype(np.float32))  # [out, groups]
    codes = torch.from_numpy(blocks[..., 2:].copy().view(np.int8))  # [out, groups, 32]
    dense = safe_open(str(model_dir / "model.safetensors"), framework="pt").get_tensor("model.embed_tokens.weight")
    packed = quantize_q8_0(dense, None, keep_dense=True)
    ours, _, _ = q8_0_values(packed)
    assert torch.equal(ours, codes.reshape(out_features, in_features))  # Q8_0's rule, applied again: its own codes
    if kernels == "minisgl":  # the fp16 scale, recomputed in fp32 as max|w| / 127: equal within fp32 rounding
        torch.testing.assert_close(packed.scale, scale, rtol=2.0**-22, atol=0)
    else:
        assert torch.equal(packed.scale, scale.T.to(torch.bfloat16))


def pack_random(kind: str, batch_invariant: bool) -> PackedWeight:
    weight = random_int4(64, 256)
    if kind == "int4":
        return weight.pack(torch.float32, None, batch_invariant)
    return quantize_q8_0(weight.dequantize(), None, keep_dense=False, batch_invariant=batch_invariant)


@pytest.mark.parametrize("kind", ["int4", "int8"])
def test_batch_invariant_kernels_compute_each_row_on_its_own(kernels: str, kind: str) -> None:
    # what --deterministic relies on: one kernel for every batch size, so a row alone gives what it
    # gives in a batch of 37 (which also crosses minisgl's 8-row chunks)
    packed = pack_random(kind, batch_invariant=True)
    x = torch.randn(37, 256, generator=torch.Generator().manual_seed(4))
    batched = packed.matmul(x)
    for i in (0, 3, 4, 8, 9, 36):
        assert torch.equal(packed.matmul(x[i : i + 1])[0], batched[i]), i


@pytest.mark.parametrize("kind", ["int4", "int8"])
def test_above_a_few_rows_the_matrix_matrix_kernel_takes_over(monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    if quantized.cpu_kernels() is None:
        pytest.skip("minisgl's CPU kernels could not be built here (no C compiler?): the log says why")
    kernels, calls = quantized.cpu_kernels(), []
    name = "q4_1" if kind == "int4" else "q8_0"
    original = getattr(kernels, name)

    def spy(*args, kernel: str = "gemv"):
        calls.append(kernel)
        return original(*args, kernel=kernel)

    monkeypatch.setattr(kernels, name, spy)
    rows = quantized.gemv_max_rows()
    x = torch.randn(3 * rows + 1, 256, generator=torch.Generator().manual_seed(5))
    packed = pack_random(kind, batch_invariant=False)
    few, many = packed.matmul(x[:rows]), packed.matmul(x)
    matrix_kernel = "tiles" if kernels.amx_bf16 else "gemm"  # bf16 products on AMX tiles where the CPU has them
    assert calls == ["gemv", matrix_kernel]
    # each kernel still computes every row on its own: the same rows in a batch of 5 or 9 and of 25
    assert torch.equal(packed.matmul(x[: rows + 1]), many[: rows + 1])
    # the two kernels round differently (16-bit activations in one, bf16 or fp32 in the other): close, not equal
    tolerance = 2e-2 if matrix_kernel == "tiles" else 1e-3
    torch.testing.assert_close(few, many[:rows], rtol=tolerance, atol=tolerance * many.abs().max().item())
    calls.clear()
    pack_random(kind, batch_invariant=True).matmul(x)
    assert calls == ["gemv"]  # --deterministic: the matrix-vector kernel whatever the batch


def test_batches_above_max_quantized_rows_take_the_dense_copy(kernels: str) -> None:
    weight = random_int4(64, 128)
    packed = weight.pack(torch.float32, max_quantized_rows=2)
    small, large = torch.randn(2, 128), torch.randn(3, 128)
    assert torch.equal(packed.matmul(large), F.linear(large, weight.dequantize()))
    assert torch.equal(packed.matmul(small), weight.pack(torch.float32, None).matmul(small))
    assert weight.pack(torch.float32, None).dense is None  # quantized for every batch: no second copy


def test_kernel_shape_limits_are_clear_errors(kernels: str) -> None:
    if kernels == "torch":  # PyTorch's kernel packs output rows in tiles of 16
        with pytest.raises(ValueError, match="multiple of 16 output rows"):
            random_int4(40, 64).pack(torch.float32, None)
    else:  # minisgl's takes any number of output rows, odd ones included
        weight = random_int4(41, 64)
        x = torch.randn(3, 64)
        error = (weight.pack(torch.float32, None).matmul(x).double() - x.double() @ weight.dequantize().double().T).abs()
        assert (error <= int16_activation_bound(x, weight.dequantize())).all()
    with pytest.raises(ValueError, match="not whole groups of 32"):
        Int4Weight(torch.zeros(16, 48, dtype=torch.uint8), torch.ones(16, 1), torch.zeros(16, 1), 32).pack(
            torch.float32, None)


@pytest.mark.parametrize("qtype", [GGMLQuantizationType.Q4_0, GGMLQuantizationType.Q4_1])
def test_gguf_int4_weights_are_the_checkpoint_weights(qtype, gguf_model) -> None:
    model_dir = gguf_model(qtype)
    config = ModelConfig.from_dir(model_dir)
    checkpoint = safe_open(str(model_dir / "model.safetensors"), framework="pt")
    kinds = set()
    for name, weight in iter_gguf_tensors(GGUFReader(model_dir / "model.gguf"), config.num_heads,
                                          config.num_kv_heads, keep_int4=True):
        kinds.add((name.endswith("_proj.weight"), type(weight)))
        dense = weight.dequantize() if isinstance(weight, Int4Weight) else weight
        # the converted checkpoint holds GGUF's own dequantization: equal bit for bit, rotary order included
        assert torch.equal(dense, checkpoint.get_tensor(name)), name
    assert kinds == {(True, Int4Weight), (False, torch.Tensor)}  # projections 4-bit, the rest dense


def test_q8_0_projections_arrive_dequantized(gguf_model) -> None:
    model_dir = gguf_model(GGMLQuantizationType.Q8_0)
    config = ModelConfig.from_dir(model_dir)
    tensors = dict(iter_gguf_tensors(GGUFReader(model_dir / "model.gguf"), config.num_heads,
                                     config.num_kv_heads, keep_int4=True))
    assert all(isinstance(t, torch.Tensor) for t in tensors.values())


def test_quantized_shards_carry_their_scales() -> None:
    config = tiny_config()
    full = random_int4(192, 192)  # [intermediate, hidden] and [hidden, intermediate] both 192 here
    for name, dim in [("model.layers.0.mlp.up_proj.weight", 0), ("model.layers.0.mlp.down_proj.weight", 1)]:
        shards = [shard_tensor(name, full, rank, 3, config) for rank in range(3)]
        assert all(isinstance(s, Int4Weight) for s in shards)
        assert torch.equal(torch.cat([s.dequantize() for s in shards], dim=dim), full.dequantize()), name
    with pytest.raises(ModelError, match=r"tp_size=2 splits the 96 inputs .* 48, which cut through its 32-input"):
        shard_tensor("model.layers.0.self_attn.o_proj.weight", random_int4(96, 96), 0, 2, config)


def test_a_fused_weight_with_a_dense_part_is_dense() -> None:
    # llama.cpp's mixes (Q4_K_M and friends) store some projections at higher precision than others
    config = tiny_config()
    q = random_int4(96, 96)
    k, v = torch.randn(48, 96), torch.randn(48, 96)
    names = [f"model.layers.0.self_attn.{p}_proj.weight" for p in "qkv"]
    ((name, fused),) = list(shard_and_merge(zip(names, (q, k, v)), config, rank=0, tp_size=1))
    assert name == "model.layers.0.self_attn.qkv_proj.weight" and isinstance(fused, torch.Tensor)
    assert torch.equal(fused, torch.cat([q.dequantize(), k, v]))


def last_logits(model_dir: Path, tokens: list[int], quantization: str) -> torch.Tensor:
    """Next-token logits [vocab] after `tokens`, from one tp = 1 prefill in this process."""
    engine = Engine(EngineConfig(model_dir, dtype="float32", quantization=quantization, max_quantized_rows=1 << 20,
                                 num_pages=64, cpu_threads=1, progress=False))
    req = Req(0, tokens, SamplingParams(temperature=0), len(tokens))
    req.pages = engine.kv_pool.allocator.allocate(engine.kv_pool.pages_for(len(tokens)))
    batch = make_prefill_batch([req], [len(tokens)], engine.kv_pool, engine.device)
    engine.attn_backend.prepare(batch)
    with torch.inference_mode(), forward_context(batch, engine.attn_backend):
        logits = engine.model.forward(batch)[0]
    engine.shutdown()
    return logits


def test_quantized_greedy_tokens_agree_at_tp_1_and_3(gguf_model) -> None:  # with this machine's kernels
    model_dir = gguf_model(GGMLQuantizationType.Q4_1)
    prompts = [[1, 5, 9, 200, 17], [1, 300, 301, 302, 9, 9, 9, 40], [1, 77]]
    greedy = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    # max_quantized_rows large: every step, prefill included, runs the int4 kernel
    args = dict(dtype="float32", quantization="gguf", max_quantized_rows=1 << 20, num_pages=512, cpu_threads=1,
                progress=False)
    tokens = {}
    for tp in (1, 3):
        with LLM(model_dir, tp_size=tp, **args) as llm:
            tokens[tp] = [o.token_ids for o in llm.generate(prompts, greedy)]
    # The kernels round activations to 16-bit codes (minisgl's) or to bf16 (PyTorch's), and at tp 3 each
    # rank rounds its own slice for o_proj / down_proj: the logits differ by ~1%, so the ranks may
    # only part ways where tp 1's best two tokens are that close (this model parts at such near-ties after 14 of the 24 tokens
    # on an AVX2 CPU). A wrongly sharded scale would change the very first tokens, at clear choices.
    compared = 0
    for prompt, ours, theirs in zip(prompts, tokens[1], tokens[3]):
        agree = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), len(ours))
        compared += agree
        if agree < len(ours):
            top2 = last_logits(model_dir, prompt + ours[:agree], "gguf").topk(2).values
            assert top2[0] - top2[1] < 0.02 * top2[0].abs(), f"tp 3 left tp 1 at a clear choice: {top2.tolist()}"
    assert compared >= 6, "too few tokens agreed to mean anything"


def test_quantized_logits_stay_near_the_dense_model(kernels: str, gguf_model) -> None:
    model_dir = gguf_model(GGMLQuantizationType.Q4_1)
    prompt = [1, 300, 301, 302, 9, 9, 9, 40]
    dense, quantized = last_logits(model_dir, prompt, "none"), last_logits(model_dir, prompt, "gguf")
    # the same weights; only the kernels' rounded activations (and PyTorch's bf16 outputs) differ: ~1%
    # of the logit range
    torch.testing.assert_close(quantized, dense, rtol=0, atol=0.02 * dense.abs().max().item())
    assert quantized.argmax() == dense.argmax()


# --- dtype / quantization "auto" -------------------------------------------------------------


def fake_probe(int4_ms: dict[int, float], bf16_factor: float = 3.0) -> ProbeResult:
    """fp32 matmuls take 10 + rows ms; bf16 ones `bf16_factor` times that, under bf16 or fp32
    activations alike (the activations' rounding is a small cost the probe would see)."""
    fp32 = {rows: 10.0 + rows for rows in precision.PROBE_ROWS}
    bf16 = {r: bf16_factor * t for r, t in fp32.items()}
    return ProbeResult(
        key={},
        ms={"float32": fp32, "bfloat16": bf16, precision.BF16_MATMULS: bf16, "int4": int4_ms},
        head_ms={name: {r: 1.0 for r in fp32} for name in ("float32", "bfloat16", precision.BF16_MATMULS, "int8")},
    )


@pytest.mark.parametrize("fp32_kernels", [True, False], ids=["c-kernels", "no-c-kernels"])
def test_auto_takes_int4_for_the_batch_sizes_where_it_wins(fp32_kernels: bool) -> None:
    int4 = {1: 4.0, 2: 5.0, 4: 9.0, 8: 30.0, 16: 60.0, 32: 120.0}  # beats fp32 (11, 12, 14, 18, ...) up to 4 rows
    choice = choose_precision(fake_probe(int4), fp32_kernels=fp32_kernels)
    assert (choice.dtype, choice.matmul_dtype, choice.quantization, choice.max_quantized_rows) == (
        "float32", "float32", "gguf", 4)
    no_gguf = choose_precision(fake_probe(int4), allow_quantized=False, fp32_kernels=fp32_kernels)
    assert no_gguf.quantization == "none"
    slower = {rows: 100.0 for rows in precision.PROBE_ROWS}
    assert choose_precision(fake_probe(slower), fp32_kernels=fp32_kernels).quantization == "none"


def test_a_cpu_with_fast_bf16_gets_bf16_matmuls_and_keeps_fp32_activations_for_the_c_kernels() -> None:
    int4 = {1: 2.0, 2: 3.0, 4: 9.0, 8: 30.0, 16: 60.0, 32: 120.0}
    fast_bf16 = fake_probe(int4, bf16_factor=0.3)  # an AMX Xeon: bf16 matmuls 3x faster than fp32
    with_kernels = choose_precision(fast_bf16, fp32_kernels=True)
    # bf16 matmuls (0.3 x 14 = 4.2 ms at 4 rows) beat int4 (9 ms) from 4 rows on: int4 keeps 1-2 rows
    assert (with_kernels.dtype, with_kernels.matmul_dtype) == ("float32", "bfloat16")
    assert (with_kernels.quantization, with_kernels.max_quantized_rows) == ("gguf", 2)
    assert "bfloat16 weights under float32 activations" in precision.describe(with_kernels)
    # without minisgl's C kernels nothing needs fp32 activations: bf16 throughout
    without = choose_precision(fast_bf16, fp32_kernels=False)
    assert (without.dtype, without.matmul_dtype) == ("bfloat16", "bfloat16")
    # a user who names fp32 gets fp32 matmuls, however fast bf16 is
    named = choose_precision(fast_bf16, dtype="float32", fp32_kernels=True)
    assert (named.dtype, named.matmul_dtype) == ("float32", "float32")
    # a probe from a PyTorch without oneDNN prepacking has no bf16-matmul entry: never picked
    no_entry = dataclasses.replace(fast_bf16, ms={k: v for k, v in fast_bf16.ms.items()
                                                  if k != precision.BF16_MATMULS})
    assert choose_precision(no_entry, fp32_kernels=True).matmul_dtype == "float32"


def test_auto_on_a_fast_bf16_cpu_takes_bf16_matmuls_but_not_for_deterministic_runs(gguf_model, monkeypatch):
    fast_bf16 = fake_probe({1: 2.0, 2: 3.0, 4: 9.0, 8: 30.0, 16: 60.0, 32: 120.0}, bf16_factor=0.3)
    monkeypatch.setattr(precision, "cached_probe", lambda *args: fast_bf16)
    monkeypatch.setattr(precision, "cpu_kernels", lambda: object())  # as where the C kernels are built
    model_dir = gguf_model(GGMLQuantizationType.Q4_1)
    free = resolve_precision(EngineConfig(model_dir))
    assert (free.dtype, free.matmul_dtype, free.quantization, free.max_quantized_rows) == (
        "float32", "bfloat16", "gguf", 2)
    # fixed-tile matmuls (and never a prepacked weight) for --deterministic: nothing runs in bf16
    fixed = resolve_precision(EngineConfig(model_dir, deterministic=True))
    assert (fixed.dtype, fixed.matmul_dtype, fixed.max_quantized_rows) == ("float32", "float32", None)
    # a bf16 model whose 4-bit weights win at every batch: resolved again (with matmul_dtype bfloat16 now),
    # it stays a bf16 model rather than becoming fp32 activations with bf16 matmuls
    every_batch = dataclasses.replace(fast_bf16, ms={**fast_bf16.ms, "int4": {r: 0.1 for r in precision.PROBE_ROWS}})
    monkeypatch.setattr(precision, "cached_probe", lambda *args: every_batch)
    bf16_model = resolve_precision(EngineConfig(model_dir, dtype="bfloat16", quantization="gguf"))
    assert (bf16_model.dtype, bf16_model.matmul_dtype, bf16_model.max_quantized_rows) == ("bfloat16", "bfloat16", None)
    for resolved in (free, fixed, bf16_model):  # the engine resolves the launcher's config again: it must stand
        assert resolve_precision(resolved) == resolved


def test_probe_runs_once_per_machine_and_model(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MINISGL_CACHE_DIR", str(tmp_path))
    calls = []

    def counting_probe(model, tp_size, threads):
        calls.append((tp_size, threads))
        return dataclasses.replace(fake_probe({r: 1.0 for r in precision.PROBE_ROWS}),
                                   key=precision.probe_key(model, tp_size, threads))

    monkeypatch.setattr(precision, "run_probe", counting_probe)
    monkeypatch.setattr(precision, "cpu_share", lambda *args: 0.95)  # a quiet machine
    model = tiny_config()
    first = precision.cached_probe(model, 1, 2)
    second = precision.cached_probe(model, 1, 2)
    assert calls == [(1, 2)] and second.ms == first.ms  # the second came from the file
    (cached,) = (tmp_path / "probe").iterdir()
    assert json.loads(cached.read_text())["key"]["cpu"] == precision.cpu_name()
    precision.cached_probe(model, 1, 1)  # another thread count is another measurement
    assert calls == [(1, 2), (1, 1)]
    monkeypatch.setattr(precision, "cpu_share", lambda *args: 0.5)  # a busy machine
    precision.cached_probe(model, 2, 1)
    precision.cached_probe(model, 2, 1)
    assert calls[2:] == [(2, 1), (2, 1)]  # measured each time, never cached


def test_cpu_share_sees_a_process_that_waits_and_one_that_computes() -> None:
    start_wall, start_cpu = time.perf_counter(), time.process_time()
    time.sleep(0.3)  # no CPU at all
    assert precision.cpu_share(start_wall, start_cpu, threads=1) < 0.2
    start_wall, start_cpu = time.perf_counter(), time.process_time()
    while time.process_time() - start_cpu < 0.3:  # 0.3 s of CPU, however long the wall clock takes
        pass
    alone = precision.cpu_share(start_wall, start_cpu, threads=1)
    assert alone > 0.1  # fails only where this process got under a tenth of a core (CI runs 2 workers on 2)
    assert precision.cpu_share(start_wall, start_cpu, threads=4) < alone / 2


def test_the_real_probe_measures_every_variant() -> None:
    model = tiny_config()
    result = precision.run_probe(model, tp_size=1, threads=1)
    bf16_matmuls = {precision.BF16_MATMULS} if bf16_prepacking_available() else set()
    assert set(result.ms) == {"float32", "bfloat16", "int4"} | bf16_matmuls
    assert set(result.head_ms) == {"float32", "bfloat16", "int8"} | bf16_matmuls
    assert all(ms > 0 for times in result.ms.values() for ms in times.values())


def test_explicit_choices_skip_the_probe_and_bad_ones_fail(gguf_model, tiny_model_dir, monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(precision, "cached_probe", lambda *args: pytest.fail("the probe ran"))
    dense_dir = tiny_model_dir(TINY)
    explicit = resolve_precision(EngineConfig(dense_dir, dtype="float32"))
    assert (explicit.dtype, explicit.quantization) == ("float32", "none")
    # machines of a multi-node run could each measure differently: auto is fp32 there, unmeasured
    multi_node = resolve_precision(EngineConfig(gguf_model(GGMLQuantizationType.Q4_1), nnodes=2))
    assert (multi_node.dtype, multi_node.quantization) == ("float32", "none")
    with pytest.raises(ValueError, match=r"has none; use --quantization none"):
        resolve_precision(EngineConfig(dense_dir, dtype="float32", quantization="gguf"))
    with pytest.raises(ValueError, match="CPU only"):
        resolve_precision(EngineConfig(gguf_model(GGMLQuantizationType.Q4_1), device="cuda", quantization="gguf"))
    moe_dir = tmp_path / "moe"
    shutil.copytree(tiny_model_dir("qwen3-moe"), moe_dir)
    (moe_dir / "model.gguf").touch()  # only its presence is checked before the layout
    with pytest.raises(ValueError, match="not a mixture of experts"):
        resolve_precision(EngineConfig(moe_dir, dtype="float32", quantization="gguf"))
    forced = resolve_precision(EngineConfig(gguf_model(GGMLQuantizationType.Q4_1), dtype="float32",
                                            quantization="gguf", max_quantized_rows=4))
    assert (forced.quantization, forced.max_quantized_rows) == ("gguf", 4)


def test_packed_weights_load_into_the_layers(kernels: str, gguf_model) -> None:
    engine = Engine(EngineConfig(gguf_model(GGMLQuantizationType.Q4_1), dtype="float32", quantization="gguf",
                                 max_quantized_rows=8, num_pages=64, cpu_threads=1, progress=False))
    state = engine.model.state_dict()
    packed = {name for name, w in state.items() if isinstance(w, (BlockQ4Weight, PackedInt4Weight))}
    assert packed and all(name.endswith(("qkv_proj.weight", "o_proj.weight", "gate_up_proj.weight",
                                         "down_proj.weight")) for name in packed)
    assert len(packed) == 4 * TINY_MODEL_SPECS[TINY].config.num_hidden_layers
    # the GGUF's Q8_0 tied embedding: an 8-bit LM head whose lookups read the dense rows
    embedding = state["model.embed_tokens.weight"]
    checkpoint = safe_open(str(engine.model_path / "model.safetensors"), framework="pt")
    assert isinstance(embedding, (BlockQ8Weight, PackedInt8Weight))
    assert torch.equal(quantized.dense_table(embedding), checkpoint.get_tensor("model.embed_tokens.weight"))
    engine.shutdown()
