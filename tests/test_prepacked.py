"""fp32 weights prepacked for oneDNN on the CPU (layers/prepacked.py): the same products as F.linear
within fp32 rounding, every matmul weight of a loaded model swapped (the tied embedding keeping its
rows for lookups), and none where the engine must keep plain tensors."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from gguf import GGMLQuantizationType
from safetensors import safe_open

from minisgl.core import Req, SamplingParams, forward_context
from minisgl.engine import engine as engine_module
from minisgl.engine import precision
from minisgl.config import EngineConfig
from minisgl.engine.engine import Engine
from minisgl.layers.amx_tiles import AmxTileWeight, amx_tiles_available
from minisgl.layers.linear import linear
from minisgl.layers.prepacked import PrepackedFloatWeight, bf16_prepacking_available, prepacking_available
from minisgl.layers.quantized import BlockQ4Weight, PackedInt4Weight, dense_table
from minisgl.scheduler.batch import make_prefill_batch
from minisgl.testing.tiny_gguf import make_tiny_gguf_model
from minisgl.testing.tiny_models import TINY_MODEL_SPECS

pytestmark = pytest.mark.skipif(not prepacking_available(), reason="this PyTorch build has no oneDNN linear prepack")

MATMUL_SUFFIXES = ("qkv_proj.weight", "o_proj.weight", "gate_up_proj.weight", "down_proj.weight")


def fp32_tolerance(x: torch.Tensor, weight: torch.Tensor) -> float:
    """A bound on two fp32 summation orders' difference: a few ulps of the largest |x| |W| sum."""
    return 8 * x.shape[-1] * torch.finfo(torch.float32).eps * (x.abs() @ weight.abs().t()).max().item()


@pytest.mark.parametrize("rows", [1, 7, 32, 33, 130])
def test_prepacked_matmul_is_f_linear_within_fp32_rounding(rows: int) -> None:
    generator = torch.Generator().manual_seed(rows)
    weight = torch.randn(96, 200, generator=generator)
    x = torch.randn(rows, 200, generator=generator)
    packed = PrepackedFloatWeight.from_dense(weight, keep_dense=False)
    y = packed.matmul(x)
    assert y.shape == (rows, 96) and y.dtype == torch.float32
    torch.testing.assert_close(y, F.linear(x, weight), rtol=0, atol=fp32_tolerance(x, weight))
    bias = torch.randn(96, generator=generator)
    torch.testing.assert_close(linear(x, packed, bias), F.linear(x, weight, bias), rtol=0,
                               atol=fp32_tolerance(x, weight))


def test_a_strided_input_and_the_weight_are_left_as_they_were() -> None:
    weight = torch.randn(64, 48)
    original = weight.clone()
    wide = torch.randn(5, 100)
    x = wide[:, 10:58]  # a view: rows 100 apart in memory
    packed = PrepackedFloatWeight.from_dense(weight, keep_dense=True)
    torch.testing.assert_close(packed.matmul(x), F.linear(x, weight), rtol=0, atol=fp32_tolerance(x, weight))
    assert torch.equal(weight, original) and packed.dense is weight
    assert packed.kernel_bytes == weight.nbytes


def load(model_dir, **config) -> Engine:
    return Engine(EngineConfig(model_dir, num_pages=64, cpu_threads=1, progress=False, **config))


def last_logits(engine: Engine, tokens: list[int]) -> torch.Tensor:
    """Next-token logits [vocab] after `tokens`, from one prefill."""
    req = Req(0, tokens, SamplingParams(temperature=0), len(tokens))
    req.pages = engine.kv_pool.allocator.allocate(engine.kv_pool.pages_for(len(tokens)))
    batch = make_prefill_batch([req], [len(tokens)], engine.kv_pool, engine.device)
    engine.attn_backend.prepare(batch)
    with torch.inference_mode(), forward_context(batch, engine.attn_backend):
        return engine.model.forward(batch)[0]


def test_an_fp32_engine_prepacks_every_matmul_weight_and_computes_the_same_logits(tiny_model_dir, monkeypatch) -> None:
    model_dir = tiny_model_dir("llama-tied")
    engine = load(model_dir, dtype="float32")
    state = engine.model.state_dict()
    packed = {name for name, w in state.items() if isinstance(w, PrepackedFloatWeight)}
    layers = TINY_MODEL_SPECS["llama-tied"].config.num_hidden_layers
    assert {n for n in packed if n.endswith(MATMUL_SUFFIXES)} == {n for n in state if n.endswith(MATMUL_SUFFIXES)}
    assert len(packed) == 4 * layers + 1  # and the tied embedding, which serves as the LM head
    embedding = state["model.embed_tokens.weight"]
    assert isinstance(embedding, PrepackedFloatWeight) and isinstance(embedding.dense, torch.Tensor)
    prompt = [1, 300, 301, 302, 9, 9, 9, 40]
    prepacked = last_logits(engine, prompt)
    engine.shutdown()

    monkeypatch.setattr(engine_module, "prepacking_available", lambda: False)
    plain_engine = load(model_dir, dtype="float32")
    assert not any(isinstance(w, PrepackedFloatWeight) for w in plain_engine.model.state_dict().values())
    plain = last_logits(plain_engine, prompt)
    plain_engine.shutdown()
    torch.testing.assert_close(prepacked, plain, rtol=1e-4, atol=1e-4 * plain.abs().max().item())


@pytest.mark.parametrize("config", [dict(dtype="bfloat16"), dict(dtype="float32", deterministic=True)],
                         ids=["bf16", "deterministic"])
def test_engines_that_need_plain_tensors_keep_them(tiny_model_dir, config: dict) -> None:
    engine = load(tiny_model_dir("llama-tied"), **config)
    try:
        assert not any(isinstance(w, PrepackedFloatWeight) for w in engine.model.state_dict().values())
    finally:
        engine.shutdown()


def test_the_dense_copy_a_4bit_layer_keeps_for_large_batches_is_prepacked_too(tmp_path) -> None:
    model_dir = make_tiny_gguf_model("llama-tied", tmp_path / "q4_1", GGMLQuantizationType.Q4_1)
    engine = load(model_dir, dtype="float32", quantization="gguf", max_quantized_rows=2)
    try:
        int4 = [w for w in engine.model.state_dict().values() if isinstance(w, (BlockQ4Weight, PackedInt4Weight))]
        assert int4 and all(isinstance(w.dense, PrepackedFloatWeight) for w in int4)
        weight = int4[0]
        x = torch.randn(5, weight.shape[1])  # 5 rows > 2: the dense copy's path
        by_int4_kernel = weight._kernel(x)  # the same weights, activations rounded by the kernel
        by_dense_copy = weight.matmul(x)
        assert by_dense_copy.shape == (5, weight.shape[0])
        torch.testing.assert_close(by_dense_copy, by_int4_kernel, rtol=0, atol=0.02 * by_int4_kernel.abs().max().item())
        # the tied 8-bit head: its large batches take a prepacked copy, its lookups the same dense rows
        head = engine.model.model.embed_tokens.weight
        assert isinstance(head.dense, PrepackedFloatWeight)
        checkpoint = safe_open(str(model_dir / "model.safetensors"), framework="pt")
        assert torch.equal(dense_table(head), checkpoint.get_tensor("model.embed_tokens.weight"))
    finally:
        engine.shutdown()


# --- bf16 matmuls under fp32 activations (matmul_dtype="bfloat16") -----------------------------

needs_bf16_prepacking = pytest.mark.skipif(not bf16_prepacking_available(), reason=(
    "this CPU's oneDNN cannot hold bf16 weights (AVX512-BW/VL/DQ or AVX-NE-CONVERT needed)"))


def bf16_tolerance(x: torch.Tensor, weight: torch.Tensor) -> float:
    """Rounding x and W to bf16 (8 significant bits, relative error <= 2^-8 each) moves a product
    by at most ~2^-7 of the largest |x| |W| sum; fp32 summation adds far less."""
    return 2**-7 * (x.abs() @ weight.abs().t()).max().item()


@needs_bf16_prepacking
@pytest.mark.parametrize("rows", [1, 9, 32, 70])
def test_bf16_matmuls_take_fp32_activations_and_give_fp32_within_bf16_rounding(rows: int) -> None:
    generator = torch.Generator().manual_seed(100 + rows)
    weight = torch.randn(48, 160, generator=generator)
    x = torch.randn(rows, 160, generator=generator)
    x_before, weight_before = x.clone(), weight.clone()
    packed = PrepackedFloatWeight.from_dense(weight, keep_dense=False, matmul_dtype=torch.bfloat16)
    y = packed.matmul(x)
    assert y.shape == (rows, 48) and y.dtype == torch.float32
    exact = F.linear(x.double(), weight.double()).float()
    torch.testing.assert_close(y, exact, rtol=0, atol=bf16_tolerance(x, weight))
    # what bf16 matmuls are: the product of the bf16-rounded operands, summed in fp32
    rounded = F.linear(x.bfloat16().float(), weight.bfloat16().float())
    torch.testing.assert_close(y, rounded, rtol=0, atol=fp32_tolerance(x, weight) + 2**-8 * rounded.abs().max().item())
    assert torch.equal(x, x_before) and torch.equal(weight, weight_before)
    assert packed.kernel_bytes == weight.numel() * 2  # half the fp32 bytes per call


@needs_bf16_prepacking
def test_an_engine_with_bf16_matmuls_keeps_fp32_everywhere_else(tmp_path, tiny_model_dir) -> None:
    model_dir = make_tiny_gguf_model("llama-tied", tmp_path / "q4_1", GGMLQuantizationType.Q4_1)
    prompt = [1, 300, 301, 302, 9, 9, 9, 40]
    fp32 = load(model_dir, dtype="float32", quantization="gguf", max_quantized_rows=2)
    reference = last_logits(fp32, prompt)  # 8 prompt rows > 2: the dense copies' path
    fp32.shutdown()
    engine = load(model_dir, dtype="float32", quantization="gguf", max_quantized_rows=2, matmul_dtype="bfloat16")
    try:
        assert engine.dtype == torch.float32 and engine.config.matmul_dtype == "bfloat16"
        state = engine.model.state_dict()
        int4 = [w for w in state.values() if isinstance(w, (BlockQ4Weight, PackedInt4Weight))]
        assert int4 and all(w.dense.matmul_dtype == torch.bfloat16 for w in int4)
        head = engine.model.model.embed_tokens.weight
        assert head.dense.matmul_dtype == torch.bfloat16
        for weight in [*int4, head]:  # AMX tiles where minisgl's kernel runs
            assert type(weight.dense) is (AmxTileWeight if amx_tiles_available() else PrepackedFloatWeight)
        checkpoint = safe_open(str(model_dir / "model.safetensors"), framework="pt")
        assert torch.equal(dense_table(head), checkpoint.get_tensor("model.embed_tokens.weight"))  # fp32 lookups
        assert engine.kv_pool.k_buffer[0].dtype == torch.float32
        logits = last_logits(engine, prompt)
    finally:
        engine.shutdown()
    assert logits.dtype == torch.float32
    torch.testing.assert_close(logits, reference, rtol=0, atol=0.05 * reference.abs().max().item())


@pytest.mark.parametrize("config, message", [
    (dict(dtype="float32", matmul_dtype="float16"), "unknown matmul_dtype"),
    (dict(dtype="auto", matmul_dtype="bfloat16"), "use it with dtype float32"),
    (dict(dtype="bfloat16", matmul_dtype="float32"), "under fp32 activations"),
    (dict(dtype="float32", matmul_dtype="bfloat16", deterministic=True), "without --deterministic"),
], ids=["unknown", "auto", "bf16-model", "deterministic"])
def test_bf16_matmuls_refuse_what_they_do_not_mean(tiny_model_dir, config: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        load(tiny_model_dir("llama-tied"), **config)


def test_a_cpu_without_bf16_prepacking_is_told_so(tiny_model_dir, monkeypatch) -> None:
    monkeypatch.setattr(precision, "bf16_prepacking_available", lambda: False)  # an AVX2-only CPU's answer
    with pytest.raises(ValueError, match="has no bf16 matmuls.*use matmul_dtype float32"):
        load(tiny_model_dir("llama-tied"), dtype="float32", matmul_dtype="bfloat16")
