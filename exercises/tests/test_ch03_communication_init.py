"""Grades chapter 03's unique-id broadcast on real ranks: random bytes stand in for ncclGetUniqueId,
different on every rank, so an id taken from the wrong rank (or made twice) is visible. The group
given is never the default one: all ranks in a group of their own, or the ranks split in two halves
(at world size 2, groups of one), where the second half's rank 0 is not global rank 0."""

from __future__ import annotations

import random

import pytest

from exercises.grader import adapters
from exercises.grader.checks import assert_collectives, values
from exercises.grader.outcomes import WrongAnswer
from exercises.grader.ranks import RankContext

BROADCAST = "torch.distributed.broadcast"


def _id_of(seed: int, rank: int) -> bytes:
    return random.Random(seed * 1000 + rank).randbytes(128)


def _unique_id_job(ctx: RankContext, impl: str, seed: int, group: str) -> dict:
    import torch.distributed as dist

    cpu_group = ctx.side_group if group == "side" else ctx.half_group
    calls = []

    def create_id() -> bytes:
        calls.append(ctx.rank)
        return _id_of(seed, ctx.rank)  # a different "unique id" on every rank that asks

    unique_id = adapters.broadcast_unique_id(impl, create_id, cpu_group)
    return {"id": unique_id, "calls": len(calls), "root": dist.get_global_rank(cpu_group, 0),
            "group_rank": dist.get_rank(cpu_group)}


@pytest.mark.task("03-communication-init/unique-id")
@pytest.mark.timeout(180)
@pytest.mark.parametrize("group", ["side", "half"], ids=["all-ranks-group", "half-groups"])
def test_unique_id_broadcast(impl, run_ranks, world_size, group):
    seed = random.randrange(1 << 30)
    results = run_ranks(_unique_id_job, impl=impl, seed=seed, group=group)
    problems = []
    for rank, result in enumerate(values(results)):
        got, root = result["id"], result["root"]
        expected = _id_of(seed, root)
        if not isinstance(got, bytes) or len(got) != 128:
            problems.append(f"rank {rank}: returned {type(got).__name__} of length {len(got)}, expected 128 bytes")
        elif got != expected:
            source = [r for r in range(world_size) if _id_of(seed, r) == got]
            origin = f"rank {source[0]}'s id" if source else "bytes no rank created"
            first = next(i for i, (a, b) in enumerate(zip(got, expected)) if a != b)
            problems.append(f"rank {rank}: got {origin}, not its group's rank 0 (global rank {root}) "
                            f"(first bad byte {first})")
        wanted_calls = 1 if result["group_rank"] == 0 else 0
        if result["calls"] != wanted_calls:
            problems.append(f"rank {rank} (rank {result['group_rank']} of its group): called create_id "
                            f"{result['calls']} times, expected {wanted_calls}")
    if problems:
        raise WrongAnswer(f"broadcast_unique_id at world size {world_size}, {group} group(s):\n  "
                          + "\n  ".join(problems))
    assert_collectives(f"broadcast_unique_id ({group} group)", results, {(BROADCAST, group): 1})
