"""Grades chapter 00's warm-up: one all-reduce through minisgl.distributed, on 2 and 4 real ranks
and at tp = 1, on the device each rank was given."""

from __future__ import annotations

import pytest

from exercises.grader import adapters
from exercises.grader.checks import SEAM_ALL_REDUCE, assert_collectives
from exercises.grader.outcomes import WrongAnswer
from exercises.grader.ranks import RankContext, tp_view


def _rank_sum_job(ctx: RankContext, impl: str, tp_size: int) -> tuple[object, str]:
    if tp_size == 1:
        with tp_view(0, 1):  # every rank on its own: a tp = 1 run
            return adapters.rank_sum(impl, ctx.device), ctx.device.type
    return adapters.rank_sum(impl, ctx.device), ctx.device.type


@pytest.mark.task("00-getting-started/rank-sum")
@pytest.mark.timeout(180)
@pytest.mark.parametrize("tp", ["world", "tp1"])
def test_rank_sum(impl, run_ranks, world_size, tp):
    tp_size = world_size if tp == "world" else 1
    results = run_ranks(_rank_sum_job, impl=impl, tp_size=tp_size)
    expected = sum(range(tp_size))
    wrong = [f"rank {rank}: got {r.value[0]!r}" for rank, r in enumerate(results)
             if type(r.value[0]) is not int or r.value[0] != expected]
    if wrong:
        raise WrongAnswer(f"rank_sum at tp {tp_size} should be the int {expected} on every rank; " + "; ".join(wrong))
    assert_collectives(f"rank_sum at tp {tp_size}", results, {SEAM_ALL_REDUCE: 1})
    elsewhere = [rank for rank, r in enumerate(results) if r.collectives[0].device != r.value[1]]
    if elsewhere:
        raise WrongAnswer(f"rank_sum: ranks {elsewhere} summed a tensor that is not on the device they were given")
