"""Grades chapter 06 on real ranks with the engine's ZmqIO (real ZMQ sockets over ipc://): four
scheduler steps, one of them empty, with encoded requests of very different sizes. The CPU group is
never the default one, and every kind of group is tried, one job each: all ranks in a group of
their own; two contiguous halves (at world size 2, groups of one: tp = 1), where the second half's
rank 0 is not global rank 0; at world size 4 the strided groups {0, 2} and {1, 3}, where a group's
rank 0 is not a global rank minus an offset. The count travels as the contract says: one int64 [1]."""

from __future__ import annotations

import pytest

from exercises.grader import adapters, sandbox
from exercises.grader.checks import assert_collectives
from exercises.grader.outcomes import WrongAnswer
from minisgl.core import SamplingParams
from minisgl.message import AbortRequest, GenerateRequest, encode_message

BROADCAST = "torch.distributed.broadcast"


def _steps() -> list[list[bytes]]:
    def request(uid: int, length: int) -> bytes:
        return encode_message(GenerateRequest(uid, list(range(length)), SamplingParams(max_tokens=4)))

    return [[request(1, 3), request(2, 20_000), request(3, 1)], [], [encode_message(AbortRequest(2))],
            [request(4, 7), request(5, 2)]]


@pytest.mark.task("06-rank0-broadcast/receive-step")
@pytest.mark.timeout(180)
def test_receive_step(impl, world_size):
    steps, groups = _steps(), adapters.groups_of(world_size)
    ipc_dir = sandbox.current().writable_dir("ipc")  # a folder of sockets per kind of group under it

    def pulled(rank: int, group: str) -> list[list[bytes]]:
        """Only each group's rank 0 is handed the payloads; the others must learn them from it."""
        return steps if rank == adapters.group_members(rank, world_size, group)[0] else [[] for _ in steps]

    for group in groups:  # one job each: a rank that hangs is named with the rank that never joined it
        results = adapters.on_ranks(impl, [adapters.receive_step(str(ipc_dir / group), pulled(rank, group), group)
                                           for rank in range(world_size)])
        what = f"receive_step at world size {world_size}, {group} group(s)"
        problems = []
        for rank, result in enumerate(results):
            got_steps = result.value if isinstance(result.value, list) else []
            if result.extra.get("modified"):
                problems.append(f"rank {rank}: receive_step modified the list of payloads it was given")
            for step, expected in enumerate(steps):
                got = got_steps[step] if step < len(got_steps) else None
                if not isinstance(got, list) or got != expected:
                    got = got if isinstance(got, list) else []
                    sizes = [len(p) if isinstance(p, bytes) else type(p).__name__ for p in got]
                    problems.append(f"rank {rank}, step {step}: got {len(got)} payloads of sizes {sizes}, expected "
                                    f"its group's rank 0's {len(expected)} of sizes {[len(p) for p in expected]}")
                    break
        if problems:
            raise WrongAnswer(f"{what}:\n  " + "\n  ".join(problems))
        size = len(adapters.group_members(0, world_size, group))
        # one count per step from the group's rank 0; nothing at all in a group of one (tp = 1)
        expected = {(BROADCAST, group): len(steps)} if size > 1 else {}
        assert_collectives(f"receive_step, {len(steps)} steps, tp={size}, {group} group(s)", results, expected,
                           {(BROADCAST, group): ((1,), "the count alone, an int64 tensor [1]")})
