"""Grades chapter 00's warm-up: one all-reduce through minisgl.distributed, on 2 and 4 real ranks
and at tp = 1, on the device each rank was given."""

from __future__ import annotations

import pytest

from exercises.grader import adapters
from exercises.grader.checks import SEAM_ALL_REDUCE, assert_collectives
from exercises.grader.outcomes import WrongAnswer
from exercises.grader.ranks import choose_backend


@pytest.mark.task("00-getting-started/rank-sum")
@pytest.mark.timeout(180)
@pytest.mark.parametrize("tp", ["world", "tp1"])
def test_rank_sum(run_ranks, world_size, tp):
    tp_size = world_size if tp == "world" else 1
    # at tp = 1 every rank is on its own: rank 0 of 1
    results = run_ranks([adapters.rank_sum((rank if tp_size > 1 else 0, tp_size)) for rank in range(world_size)])
    expected = sum(range(tp_size))
    wrong = [f"rank {rank}: got {r.value!r}" for rank, r in enumerate(results)
             if type(r.value) is not int or r.value != expected]
    if wrong:
        raise WrongAnswer(f"rank_sum at tp {tp_size} should be the int {expected} on every rank; " + "; ".join(wrong))
    assert_collectives(f"rank_sum at tp {tp_size}", results, {SEAM_ALL_REDUCE: 1})
    device = choose_backend(world_size)[0]
    elsewhere = [rank for rank, r in enumerate(results) if r.collectives[0].device != device]
    if elsewhere:
        raise WrongAnswer(f"rank_sum: ranks {elsewhere} summed a tensor that is not on the device they were given")
