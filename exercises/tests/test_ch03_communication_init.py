"""Grades chapter 03's unique-id broadcast on real ranks: random bytes stand in for ncclGetUniqueId,
different on every rank, so an id taken from the wrong rank (or made twice) is visible. The group
given is never the default one: all ranks in a group of their own, or the ranks split in two halves
(at world size 2, groups of one), where the second half's rank 0 is not global rank 0."""

from __future__ import annotations

import random

import pytest

from exercises.grader import adapters
from exercises.grader.checks import assert_collectives
from exercises.grader.outcomes import WrongAnswer

BROADCAST = "torch.distributed.broadcast"


def _id_of(seed: int, rank: int) -> bytes:
    return random.Random(seed * 1000 + rank).randbytes(128)


def _group_root(rank: int, world_size: int, group: str) -> int:
    """The global rank of `rank`'s group's rank 0: 0 for the all-ranks group, else the first of its half."""
    return 0 if group == "side" else (0 if rank < world_size // 2 else world_size // 2)


@pytest.mark.task("03-communication-init/unique-id")
@pytest.mark.timeout(180)
@pytest.mark.parametrize("group", ["side", "half"], ids=["all-ranks-group", "half-groups"])
def test_unique_id_broadcast(run_ranks, world_size, group):
    seed = random.randrange(1 << 30)
    # each rank's create_id returns its own id: an id taken from the wrong rank shows
    results = run_ranks([adapters.broadcast_unique_id(_id_of(seed, rank), group) for rank in range(world_size)])
    problems = []
    for rank, result in enumerate(results):
        got, root = result.value, _group_root(rank, world_size, group)
        expected = _id_of(seed, root)
        if not isinstance(got, bytes) or len(got) != 128:
            size = len(got) if isinstance(got, (bytes, list, tuple, str)) else "?"
            problems.append(f"rank {rank}: returned {type(got).__name__} of length {size}, expected 128 bytes")
        elif got != expected:
            source = [r for r in range(world_size) if _id_of(seed, r) == got]
            origin = f"rank {source[0]}'s id" if source else "bytes no rank created"
            first = next(i for i, (a, b) in enumerate(zip(got, expected)) if a != b)
            problems.append(f"rank {rank}: got {origin}, not its group's rank 0 (global rank {root}) "
                            f"(first bad byte {first})")
        wanted_calls = 1 if rank == root else 0
        if result.extra.get("calls") != wanted_calls:
            problems.append(f"rank {rank} (rank {rank - root} of its group): called create_id "
                            f"{result.extra.get('calls')} times, expected {wanted_calls}")
    if problems:
        raise WrongAnswer(f"broadcast_unique_id at world size {world_size}, {group} group(s):\n  "
                          + "\n  ".join(problems))
    assert_collectives(f"broadcast_unique_id ({group} group)", results, {(BROADCAST, group): 1})
