"""Grades chapter 00's warm-up: one all-reduce on 2 and 4 real ranks."""

from __future__ import annotations

import pytest

from exercises.grader import adapters
from exercises.grader.checks import assert_counts, values
from exercises.grader.outcomes import WrongAnswer
from exercises.grader.ranks import RankContext


def _rank_sum_job(ctx: RankContext, impl: str) -> int:
    return int(adapters.rank_sum(impl, ctx.device))


@pytest.mark.task("00-getting-started/rank-sum")
@pytest.mark.timeout(180)
def test_rank_sum(impl, run_ranks, world_size):
    results = run_ranks(_rank_sum_job, impl=impl)
    expected = sum(range(world_size))
    wrong = [f"rank {rank}: got {got}" for rank, got in enumerate(values(results)) if got != expected]
    if wrong:
        raise WrongAnswer(f"rank_sum at world size {world_size} should be {expected} on every rank; " + "; ".join(wrong))
    assert_counts("rank_sum", results, all_reduce=1)
