"""Grades chapter 07: the tensor-parallel MLP on real ranks against one plain MLP, and the local
sizes of a decoder layer for Llama-3.1-8B, SmolLM2-135M and the tiny test Llama (replicated KV)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from exercises.grader import adapters
from exercises.grader.checks import assert_counts, assert_ranks_close, values
from exercises.grader.configs import LLAMA_31_8B, SMOLLM2_135M, TINY_LLAMA
from exercises.grader.outcomes import WrongAnswer
from exercises.grader.ranks import RankContext

TOKENS, HIDDEN, INTERMEDIATE = 4, 8, 12


def _mlp_job(ctx: RankContext, impl: str, x, gate, up, down):
    to = lambda t: t.to(ctx.device)  # noqa: E731
    return adapters.tp_mlp_forward(impl, to(x), to(gate), to(up), to(down)).cpu()


@pytest.mark.task("07-tp-decoder-layer/tp-mlp")
@pytest.mark.timeout(180)
def test_tp_mlp(impl, run_ranks, world_size):
    generator = torch.Generator().manual_seed(70 + world_size)
    x = torch.randn(TOKENS, HIDDEN, generator=generator)
    gate, up = torch.randn(INTERMEDIATE, HIDDEN, generator=generator), torch.randn(INTERMEDIATE, HIDDEN, generator=generator)
    down = torch.randn(HIDDEN, INTERMEDIATE, generator=generator)
    results = run_ranks(_mlp_job, impl=impl, x=x, gate=gate, up=up, down=down)
    expected = F.linear(F.silu(F.linear(x, gate)) * F.linear(x, up), down)
    # down_proj's partial sums are added by the all-reduce: another summation order than one matmul.
    assert_ranks_close(f"tp_mlp_forward (tp={world_size})", values(results), expected, rtol=1e-4, atol=1e-4)
    assert_counts("tp_mlp_forward", results, all_reduce=1)


def _expected_shapes(config: dict, tp: int, dtype_bytes: int) -> dict[str, int]:
    heads, kv = config["num_attention_heads"], config["num_key_value_heads"]
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    q_local, kv_local = heads // tp, max(1, kv // tp)
    return {
        "local_q_heads": q_local, "local_kv_heads": kv_local, "qkv_out": (q_local + 2 * kv_local) * head_dim,
        "o_proj_in": q_local * head_dim, "gate_up_out": 2 * config["intermediate_size"] // tp,
        "down_in": config["intermediate_size"] // tp, "vocab_shard": -(-config["vocab_size"] // tp),
        "kv_bytes_per_token": 2 * config["num_hidden_layers"] * kv_local * head_dim * dtype_bytes,
    }


SHAPE_CASES = [("llama-3.1-8b", LLAMA_31_8B, tp, 2) for tp in (1, 2, 4, 8)] + [
    ("smollm2-135m", SMOLLM2_135M, 3, 4), ("tiny-llama", TINY_LLAMA, 4, 4), ("tiny-llama", TINY_LLAMA, 8, 2)]


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


@pytest.mark.task("07-tp-decoder-layer/local-shapes")
def test_local_shapes_rejects_bad_tp(impl):
    with pytest.raises(ValueError) as error:
        adapters.local_shapes(impl, dict(SMOLLM2_135M), 2, 2)
    if "1, 3" not in str(error.value):
        raise WrongAnswer(f"the error for SmolLM2 at tp=2 should list the valid sizes '1, 3': {error.value}")
