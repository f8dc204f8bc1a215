"""Grades chapter 03's unique-id broadcast on real ranks: random bytes stand in for ncclGetUniqueId,
different on every rank, so an id taken from the wrong rank (or made twice) is visible."""

from __future__ import annotations

import random

import pytest

from exercises.grader import adapters
from exercises.grader.checks import values
from exercises.grader.outcomes import WrongAnswer
from exercises.grader.ranks import RankContext


def _id_of(seed: int, rank: int) -> bytes:
    return random.Random(seed * 1000 + rank).randbytes(128)


def _unique_id_job(ctx: RankContext, impl: str, seed: int) -> dict:
    calls = []

    def create_id() -> bytes:
        calls.append(ctx.rank)
        return _id_of(seed, ctx.rank)  # a different "unique id" on every rank that asks

    unique_id = adapters.broadcast_unique_id(impl, create_id, ctx.cpu_group)
    return {"id": unique_id, "calls": len(calls)}


@pytest.mark.task("03-communication-init/unique-id")
@pytest.mark.timeout(180)
def test_unique_id_broadcast(impl, run_ranks, world_size):
    seed = random.randrange(1 << 30)
    results = values(run_ranks(_unique_id_job, impl=impl, seed=seed))
    expected = _id_of(seed, 0)
    problems = []
    for rank, result in enumerate(results):
        got = result["id"]
        if not isinstance(got, bytes) or len(got) != 128:
            problems.append(f"rank {rank}: returned {type(got).__name__} of length {len(got)}, expected 128 bytes")
        elif got != expected:
            source = [r for r in range(world_size) if _id_of(seed, r) == got]
            origin = f"rank {source[0]}'s id" if source else "bytes no rank created"
            first = next(i for i, (a, b) in enumerate(zip(got, expected)) if a != b)
            problems.append(f"rank {rank}: got {origin}, not rank 0's (first bad byte {first})")
        wanted_calls = 1 if rank == 0 else 0
        if result["calls"] != wanted_calls:
            problems.append(f"rank {rank}: called create_id {result['calls']} times, expected {wanted_calls}")
    if problems:
        raise WrongAnswer(f"broadcast_unique_id at world size {world_size}:\n  " + "\n  ".join(problems))
