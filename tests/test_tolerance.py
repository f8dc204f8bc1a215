"""The rounding bounds of `minisgl.testing.tolerance` can fail: each admits a correct computation in
another order or dtype, and rejects the wrong answers a sharded or fused kernel realistically gives
(zeros, a scaled result, a permuted shard or routing, a transposed weight). The MoE bound is checked
at Qwen3-30B-A3B's expert shapes, those of tests/gpu/test_moe_gpu.py, with the torch loop standing in
for the kernel (on a GPU that test runs the same controls through the fused kernel)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from minisgl.layers.moe import expert_outputs_torch
from minisgl.testing.shapes import SHAPES
from minisgl.testing.tolerance import (
    assert_within,
    expert_mlp_bound,
    expert_mlp_wrong_answers,
    gamma,
    matmul_tolerance,
)


def rejected(actual: torch.Tensor, expected: torch.Tensor, tolerance: dict[str, float]) -> bool:
    try:
        torch.testing.assert_close(actual, expected, **tolerance)
    except AssertionError:
        return True
    return False


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_matmul_tolerance_admits_shards_and_rejects_wrong_ones(dtype: torch.dtype) -> None:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(5, 512, generator=generator).to(dtype)
    weight = torch.randn(512, 512, generator=generator).to(dtype)  # square: a transposed weight fits too
    tolerance = matmul_tolerance(x, weight)
    whole = F.linear(x, weight)
    column_shards = torch.cat([F.linear(x, w) for w in weight.chunk(4, dim=0)], dim=-1)
    row_shards = sum(F.linear(x_part, w_part) for x_part, w_part in
                     zip(x.chunk(4, dim=-1), weight.chunk(4, dim=-1)))  # an all-reduce's order
    assert not rejected(column_shards, whole, tolerance)
    if dtype == torch.float32:  # (in bf16 each partial sum is rounded too: a different computation)
        assert not rejected(row_shards, whole, tolerance)
    wrong = {
        "zeros": torch.zeros_like(whole),
        "scaled 1.5x": 1.5 * whole,
        "shards in the wrong order": torch.cat([F.linear(x, w) for w in reversed(weight.chunk(4, dim=0))], dim=-1),
        "transposed weight": F.linear(x, weight.t()),
        "one shard missing": torch.cat([F.linear(x, w) for w in weight.chunk(4, dim=0)[:3]]
                                       + [torch.zeros(5, 128, dtype=dtype)], dim=-1),
    }
    for name, answer in wrong.items():
        assert rejected(answer, whole, tolerance), name
    # the bound scales with the output: far below it, never a worst case that dwarfs it
    assert tolerance["atol"] < 0.05 * whole.abs().max().item()


def test_gamma_refuses_a_reduction_too_long_to_bound() -> None:
    assert gamma(4096, torch.bfloat16) == gamma(4096, torch.float32)  # bf16 matmuls accumulate in fp32
    with pytest.raises(ValueError, match="too long"):
        gamma(1 << 24, torch.float32)


def moe_case(tokens: int, hidden: int, inter: int, experts: int, top_k: int, scale: float, dtype: torch.dtype):
    generator = torch.Generator().manual_seed(tokens + hidden)
    x = torch.randn(tokens, hidden, generator=generator).to(dtype)
    topk_ids = torch.rand(tokens, experts, generator=generator).topk(top_k, dim=-1).indices
    gate_up = (scale * torch.randn(experts, 2 * inter, hidden, generator=generator)).to(dtype)
    down = (scale * torch.randn(experts, hidden, inter, generator=generator)).to(dtype)
    return x, topk_ids, gate_up, down


QWEN3_30B = SHAPES["qwen3-30b-a3b"]
CASES = {  # (tokens, hidden, inter, experts, top_k, weight scale)
    # its reduction lengths and weight scale; 16 of its 128 experts (those no token reaches change nothing)
    "qwen3-30b-a3b, one rank of tp 2": (3, QWEN3_30B["hidden_size"], QWEN3_30B["moe_intermediate_size"] // 2,
                                       16, QWEN3_30B["num_experts_per_tok"], 0.02),
    "hidden == inter": (6, 64, 64, 4, 2, 0.2),  # a transposed down weight has the right shape
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("case", CASES)
def test_expert_mlp_bound_admits_the_torch_loop_and_rejects_wrong_answers(case: str, dtype: torch.dtype) -> None:
    x, topk_ids, gate_up, down = moe_case(*CASES[case], dtype=dtype)
    bound = expert_mlp_bound(x, topk_ids, gate_up, down)
    exact = expert_outputs_torch(x.double(), topk_ids, gate_up.double(), down.double())
    computed = expert_outputs_torch(x, topk_ids, gate_up, down)
    assert_within(computed, exact, bound / 2, "the torch loop against the exact result")
    one_by_one = torch.cat([expert_outputs_torch(x[t:t + 1], topk_ids[t:t + 1], gate_up, down)
                            for t in range(x.shape[0])])  # other batch shapes: another blocking
    assert_within(one_by_one, computed, bound, "token by token against the batch")
    wrong = expert_mlp_wrong_answers(x, topk_ids, gate_up, down, expert_outputs_torch)
    assert {"zeros", "scaled 1.5x", "tokens sent to the next expert", "gate and up swapped"} <= set(wrong)
    assert ("down transposed" in wrong) == (case == "hidden == inter")
    for name, answer in wrong.items():
        with pytest.raises(AssertionError, match="outside the bound"):
            assert_within(answer, computed, bound, name)
    # far below the output it guards (the old a-priori bound was 3-200x above it)
    assert bound.max() < 0.5 * computed.abs().max()


def test_assert_within_names_the_worst_element() -> None:
    expected = torch.zeros(2, 3)
    actual = expected.clone()
    actual[1, 2] = 1.0
    with pytest.raises(AssertionError, match=r"1 of 6 elements outside the bound; worst at \(1, 2\)"):
        assert_within(actual, expected, torch.full((2, 3), 0.5))
    assert_within(actual, expected, torch.ones(2, 3))
    with pytest.raises(AssertionError, match="shape"):
        assert_within(actual[0], expected, torch.ones(2, 3))
