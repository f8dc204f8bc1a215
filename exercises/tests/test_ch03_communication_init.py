"""Grades chapter 03's unique-id broadcast on real ranks: random bytes stand in for ncclGetUniqueId,
different on every rank, so an id taken from the wrong rank (or made twice) is visible. The group
given is never the default one, and every kind of group is tried, one job each: all ranks in a
group of their own; the ranks split in two contiguous halves (at world size 2, groups of one), where
the second half's rank 0 is not global rank 0; and at world size 4 the strided groups {0, 2} and
{1, 3}, where a group's rank is not a global rank minus an offset, and {1, 3}'s rank 0 is global 1."""

from __future__ import annotations

import random

import pytest

from exercises.grader import adapters
from exercises.grader.checks import assert_collectives
from exercises.grader.outcomes import WrongAnswer

BROADCAST = "torch.distributed.broadcast"


def _id_of(seed: int, rank: int) -> bytes:
    return random.Random(seed * 1000 + rank).randbytes(128)


@pytest.mark.task("03-communication-init/unique-id")
@pytest.mark.timeout(180)
def test_unique_id_broadcast(impl, world_size):
    groups = adapters.groups_of(world_size)
    seeds = {group: random.randrange(1 << 30) for group in groups}
    # each rank's create_id returns its own id: an id taken from the wrong rank shows
    for group in groups:  # one job each: a rank that hangs in one group's broadcast is named as it waits
        results = adapters.on_ranks(impl, [adapters.broadcast_unique_id(_id_of(seeds[group], rank), group)
                                           for rank in range(world_size)])
        what = f"broadcast_unique_id at world size {world_size}, {group} group(s)"
        problems = []
        for rank, result in enumerate(results):
            group_ranks = adapters.group_members(rank, world_size, group)
            got, root = result.value, group_ranks[0]
            expected = _id_of(seeds[group], root)
            if not isinstance(got, bytes) or len(got) != 128:
                size = len(got) if isinstance(got, (bytes, list, tuple, str)) else "?"
                problems.append(f"rank {rank}: returned {type(got).__name__} of length {size}, expected 128 bytes")
            elif got != expected:
                source = [r for r in range(world_size) if _id_of(seeds[group], r) == got]
                origin = f"rank {source[0]}'s id" if source else "bytes no rank created"
                first = next(i for i, (a, b) in enumerate(zip(got, expected)) if a != b)
                problems.append(f"rank {rank} (of group {group_ranks}): got {origin}, not its group's rank 0 "
                                f"(global rank {root}) (first bad byte {first})")
            wanted_calls = 1 if rank == root else 0
            if result.extra.get("calls") != wanted_calls:
                problems.append(f"rank {rank} (rank {group_ranks.index(rank)} of group {group_ranks}): called "
                                f"create_id {result.extra.get('calls')} times, expected {wanted_calls}")
        if problems:
            raise WrongAnswer(f"{what}:\n  " + "\n  ".join(problems))
        assert_collectives(f"broadcast_unique_id ({group} group)", results, {(BROADCAST, group): 1})
