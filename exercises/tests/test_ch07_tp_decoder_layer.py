"""Grades chapter 07: the tensor-parallel MLP on real ranks against one plain float64 MLP (fp32 and
bf16, 4 tokens - the GPU's small-batch path - and 9, tp = 1 and the world size's ranks), and the
local sizes of a decoder layer for Llama-3.1-8B, SmolLM2-135M, Qwen3-0.6B (head_dim != hidden /
heads), the tiny test Llama (more ranks than KV heads, a vocabulary no tp divides) and a config
without num_key_value_heads."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from exercises.grader import adapters
from exercises.grader.checks import (
    DTYPES,
    SEAM_ALL_REDUCE,
    assert_collectives,
    assert_ranks_close,
    assert_unchanged,
    assert_ranks_raise_value_error,
    assert_value_error,
    changed,
    tolerance,
)
from exercises.grader.configs import LLAMA_31_8B, QWEN3_06B, SMOLLM2_135M, TINY_LLAMA
from exercises.grader.outcomes import WrongAnswer

HIDDEN, INTERMEDIATE = 8, 12
MLP_CASES = [(dtype, tokens, tp) for dtype in DTYPES for tokens in (4, 9) for tp in ("world", "tp1")]


@pytest.mark.task("07-tp-decoder-layer/tp-mlp", weight=2)
@pytest.mark.timeout(180)
@pytest.mark.parametrize("dtype,tokens,tp", MLP_CASES, ids=[f"{d}-{n}tok-{t}" for d, n, t in MLP_CASES])
def test_tp_mlp(run_ranks, world_size, dtype, tokens, tp):
    tp_size = world_size if tp == "world" else 1
    generator = torch.Generator().manual_seed(70 + world_size + tokens)
    x = torch.randn(tokens, HIDDEN, generator=generator).to(DTYPES[dtype])
    gate, up = (torch.randn(INTERMEDIATE, HIDDEN, generator=generator).to(DTYPES[dtype]) for _ in range(2))
    down = torch.randn(HIDDEN, INTERMEDIATE, generator=generator).to(DTYPES[dtype])
    # the full weights on every rank: the task is to shard them for this rank
    results = run_ranks([adapters.tp_mlp_forward(x, gate, up, down, tp=(rank if tp_size > 1 else 0, tp_size))
                         for rank in range(world_size)])
    x64, gate64, up64, down64 = (t.double() for t in (x, gate, up, down))
    expected = F.linear(F.silu(F.linear(x64, gate64)) * F.linear(x64, up64), down64)
    what = f"tp_mlp_forward ({dtype}, {tokens} tokens, tp={tp_size})"
    # gate/up, silu * up and the partial sums are each rounded into the dtype, then tp partials added
    assert_ranks_close(what, [r.value for r in results], expected, DTYPES[dtype],
                       tolerance(DTYPES[dtype], INTERMEDIATE, roundings=2 * tp_size + 4))
    assert_unchanged(what, [changed(r, ("x", "gate", "up", "down")) for r in results])
    assert_collectives(what, results, {SEAM_ALL_REDUCE: 1})


@pytest.mark.task("07-tp-decoder-layer/tp-mlp")
@pytest.mark.error_case
@pytest.mark.timeout(180)
def test_tp_mlp_rejects_an_intermediate_size_tp_does_not_divide(run_ranks, world_size):
    x, down = torch.randn(2, HIDDEN), torch.randn(HIDDEN, 10)
    gate, up = torch.randn(10, HIDDEN), torch.randn(10, HIDDEN)
    # every rank sees itself as rank 0 of 4 and must raise before any collective
    results = run_ranks([adapters.tp_mlp_forward(x, gate, up, down, tp=(0, 4)) for _ in range(world_size)],
                        allow_errors=True)
    assert_ranks_raise_value_error("tp_mlp_forward with intermediate_size 10 at tp=4", results,
                                   mentions="intermediate_size")


def _expected_shapes(config: dict, tp: int, dtype_bytes: int) -> dict[str, int]:
    heads = config["num_attention_heads"]
    kv = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    q_local, kv_local = heads // tp, max(1, kv // tp)
    return {
        "local_q_heads": q_local, "local_kv_heads": kv_local, "qkv_out": (q_local + 2 * kv_local) * head_dim,
        "o_proj_in": q_local * head_dim, "gate_up_out": 2 * config["intermediate_size"] // tp,
        "down_in": config["intermediate_size"] // tp, "vocab_shard": -(-config["vocab_size"] // tp),
        "kv_bytes_per_token": 2 * config["num_hidden_layers"] * kv_local * head_dim * dtype_bytes,
    }


MHA = {k: v for k, v in TINY_LLAMA.items() if k != "num_key_value_heads"}  # absent: as many as the heads
SHAPE_CASES = [("llama-3.1-8b", LLAMA_31_8B, tp, 2) for tp in (1, 2, 4, 8)] + [
    ("smollm2-135m", SMOLLM2_135M, 3, 4), ("qwen3-0.6b", QWEN3_06B, 2, 2), ("qwen3-0.6b", QWEN3_06B, 16, 2),
    ("tiny-llama", TINY_LLAMA, 4, 4), ("tiny-llama", TINY_LLAMA, 8, 2), ("tiny-mha", MHA, 4, 2)]


@pytest.mark.task("07-tp-decoder-layer/local-shapes")
@pytest.mark.parametrize("model,config,tp,dtype_bytes", SHAPE_CASES, ids=[f"{m}-tp{t}" for m, _, t, _ in SHAPE_CASES])
def test_local_shapes(impl, model, config, tp, dtype_bytes):
    got = adapters.local_shapes(impl, dict(config), tp, dtype_bytes)
    expected = _expected_shapes(config, tp, dtype_bytes)
    if not isinstance(got, dict):
        raise WrongAnswer(f"local_shapes returned {type(got).__name__}, expected a dict with keys {sorted(expected)}")
    wrong = [f"{key}: got {got.get(key)}, expected {value}" for key, value in expected.items() if got.get(key) != value]
    if wrong:
        raise WrongAnswer(f"local_shapes({model}, tp={tp}, {dtype_bytes}-byte elements):\n  " + "\n  ".join(wrong))


BAD_TP = [("smollm2-135m", SMOLLM2_135M, 2, "1, 3"), ("tiny-llama", TINY_LLAMA, 3, "1, 2, 4, 8"),
          ("12 heads, 8 kv", {**TINY_LLAMA, "num_attention_heads": 12, "num_key_value_heads": 8}, 3, "1, 2, 4")]


@pytest.mark.task("07-tp-decoder-layer/local-shapes")
@pytest.mark.error_case
@pytest.mark.parametrize("model,config,tp,valid", BAD_TP, ids=[f"{m}-tp{t}" for m, _, t, _ in BAD_TP])
def test_local_shapes_rejects_bad_tp(impl, model, config, tp, valid):
    assert_value_error(f"local_shapes({model}, tp={tp})", lambda: adapters.local_shapes(impl, dict(config), tp, 2),
                       mentions=valid)


@pytest.mark.task("07-tp-decoder-layer/local-shapes")
@pytest.mark.error_case
def test_local_shapes_names_a_missing_key(impl):
    config = {k: v for k, v in LLAMA_31_8B.items() if k != "intermediate_size"}
    assert_value_error("local_shapes of a config without intermediate_size",
                       lambda: adapters.local_shapes(impl, config, 2, 2), mentions="intermediate_size")
