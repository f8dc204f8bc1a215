"""Grades chapter 14: expert parallelism's dispatch plan (the chapter's example, placements that are
not contiguous blocks, ranks that get nothing, random routings against the rule, the round trip of
a dispatch and a combine through the plan, dtypes, untouched inputs, the documented errors)."""

from __future__ import annotations

import random

import pytest
import torch

from exercises.grader import adapters
from exercises.grader.checks import assert_value_error, changed
from exercises.grader.outcomes import WrongAnswer
from exercises.grader.ranks import choose_backend

PLAN = "14-experts-across-ranks/dispatch-plan"


def _plan(impl: str, topk_ids: list[list[int]], expert_rank: list[int], num_ranks: int) -> tuple:
    ids = torch.tensor(topk_ids, dtype=torch.int64).reshape(len(topk_ids), -1)
    return adapters.dispatch_plan(impl, ids, torch.tensor(expert_rank, dtype=torch.int64), num_ranks).value


def _rule(topk_ids: list[list[int]], expert_rank: list[int], num_ranks: int) -> tuple[list, list, list]:
    """The chapter's rule, pair by pair in plain Python."""
    experts = [e for row in topk_ids for e in row]
    order = sorted(range(len(experts)), key=lambda p: (expert_rank[experts[p]], experts[p], p))
    inverse = [0] * len(order)
    for position, pair in enumerate(order):
        inverse[pair] = position
    counts = [sum(1 for e in experts if expert_rank[e] == r) for r in range(num_ranks)]
    return order, inverse, counts


def _expect(impl: str, topk_ids: list[list[int]], expert_rank: list[int], num_ranks: int, why: str) -> None:
    got = _plan(impl, topk_ids, expert_rank, num_ranks)
    if not isinstance(got, tuple) or len(got) != 3:
        raise WrongAnswer(f"dispatch_plan should return (send_order, inverse, rank_counts), got {got!r}")
    expected = _rule(topk_ids, expert_rank, num_ranks)
    for name, tensor, want in zip(("send_order", "inverse", "rank_counts"), got, expected):
        if not isinstance(tensor, torch.Tensor) or tensor.tolist() != want:
            raise WrongAnswer(f"dispatch_plan(topk_ids={topk_ids}, expert_rank={expert_rank}, num_ranks={num_ranks}): "
                              f"{name} is {tensor.tolist() if isinstance(tensor, torch.Tensor) else tensor!r}, "
                              f"expected {want} ({why})")


@pytest.mark.task(PLAN)
def test_dispatch_plan_examples(impl):
    _expect(impl, [[2, 0], [1, 2]], [0, 0, 1], 2, "the docstring's example")
    _expect(impl, [[0, 1], [1, 0], [0, 1]], [0, 0], 1, "one rank: by expert, pairs of one expert in pair order")
    _expect(impl, [[3, 1], [2, 0]], [0, 1, 0, 1], 2,
            "experts dealt in turn (0, 2 on rank 0; 1, 3 on rank 1): by rank first, then by expert")
    _expect(impl, [[1, 0], [0, 1], [1, 0]], [0, 0], 2, "rank 1 holds no expert: its count is 0")


@pytest.mark.task(PLAN)
def test_dispatch_plan_orders_experts_inside_a_rank(impl):
    _expect(impl, [[1, 0], [0, 1], [1, 2]], [0, 0, 1], 2, "rank 0's block sends expert 0's pairs before expert 1's")
    _expect(impl, [[5], [4], [5], [4]], [2, 2, 1, 1, 0, 0], 3, "the last rank holds experts 4, 5; ranks 1, 2 get none")


@pytest.mark.task(PLAN, weight=2)
def test_dispatch_plan_random_routings(impl):
    rng = random.Random()
    for _ in range(30):
        num_ranks = rng.randint(1, 4)
        num_experts = num_ranks * rng.randint(1, 4)
        expert_rank = [e // (num_experts // num_ranks) for e in range(num_experts)]
        if rng.random() < 0.5:
            rng.shuffle(expert_rank)  # any placement, not only contiguous blocks
        k = rng.randint(1, min(3, num_experts))
        topk_ids = [rng.sample(range(num_experts), k) for _ in range(rng.randint(1, 12))]
        _expect(impl, topk_ids, expert_rank, num_ranks, "random routing, by (rank, expert, pair)")


@pytest.mark.task(PLAN)
def test_a_dispatch_and_combine_through_the_plan_is_a_round_trip(impl):
    """Send the pairs' rows in send_order, cut them into one block per rank by rank_counts, let every
    rank tag what it got, send them back in the same order and put them back with inverse: each pair
    must get its own row, tagged by the rank that holds its expert."""
    generator = torch.Generator().manual_seed(0)
    topk_ids = torch.stack([torch.randperm(8, generator=generator)[:2] for _ in range(9)])  # [9 tokens, 2]
    expert_rank = torch.arange(8) // 2  # 4 ranks, 2 experts each
    plan = adapters.dispatch_plan(impl, topk_ids.clone(), expert_rank.clone(), 4).value
    if not isinstance(plan, tuple) or len(plan) != 3 or not all(isinstance(t, torch.Tensor) for t in plan):
        raise WrongAnswer(f"dispatch_plan should return three tensors, got {plan!r:.200}")
    send_order, inverse, rank_counts = plan
    rows = torch.arange(18, dtype=torch.float32) * 10  # one row per pair
    blocks = rows[send_order].split(rank_counts.tolist())
    returned = torch.cat([block + rank for rank, block in enumerate(blocks)])  # rank r adds r to what it got
    expected = rows + expert_rank[topk_ids.reshape(-1)].float()
    if not torch.equal(returned[inverse], expected):
        raise WrongAnswer(f"the rows that come back, put in place with inverse, are {returned[inverse].tolist()}; "
                          f"expected {expected.tolist()} (each pair's row plus the rank of its expert)")


@pytest.mark.task(PLAN)
def test_dispatch_plan_returns_int64_and_leaves_inputs_unchanged(impl):
    topk_ids, expert_rank = torch.tensor([[2, 0], [1, 2], [0, 1]]), torch.tensor([0, 1, 1])
    call = adapters.dispatch_plan(impl, topk_ids, expert_rank, 3, on_device=True)  # a GPU's, where there is one
    if call.changed:
        raise WrongAnswer(f"dispatch_plan modified {', '.join(changed(call, ('topk_ids', 'expert_rank')))}; the "
                          "caller still needs them")
    result = call.value if isinstance(call.value, tuple) else ()
    if len(result) != 3:
        raise WrongAnswer(f"dispatch_plan should return (send_order, inverse, rank_counts), got {call.value!r:.200}")
    device = choose_backend(1)[0]
    if call.extra.get("devices") != [device] * 3:
        raise WrongAnswer(f"the plan's tensors are on {call.extra.get('devices')}; expected topk_ids' device, {device}")
    for name, tensor, size in zip(("send_order", "inverse", "rank_counts"), result, (6, 6, 3)):
        if not isinstance(tensor, torch.Tensor) or tensor.dtype != torch.int64 or tuple(tensor.shape) != (size,):
            got = f"{tensor.dtype} {tuple(tensor.shape)}" if isinstance(tensor, torch.Tensor) else type(tensor).__name__
            raise WrongAnswer(f"{name} should be an int64 tensor of shape ({size},), got {got}")


@pytest.mark.task(PLAN)
@pytest.mark.error_case
@pytest.mark.parametrize(("topk_ids", "expert_rank", "num_ranks", "mentions"), [
    ([[0, 3]], [0, 0, 1], 2, "topk_ids"), ([[-1, 0]], [0, 0, 1], 2, "topk_ids"),
    ([[0, 1]], [0, 2, 1], 2, "expert_rank"), ([[0, 1]], [0, -1], 2, "expert_rank"),
], ids=["expert-too-big", "expert-negative", "rank-too-big", "rank-negative"])
def test_dispatch_plan_errors(impl, topk_ids, expert_rank, num_ranks, mentions):
    assert_value_error(f"dispatch_plan({topk_ids}, {expert_rank}, {num_ranks})",
                       lambda: _plan(impl, topk_ids, expert_rank, num_ranks), mentions)
