"""Grades chapter 06 on real ranks with the engine's ZmqIO (real ZMQ sockets over ipc://): four
scheduler steps, one of them empty, with encoded requests of very different sizes. The CPU group is
never the default one: all ranks in a group of their own, or two halves (at world size 2, groups of
one: tp = 1), where the second half's rank 0 is not global rank 0."""

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


def _group_root(rank: int, world_size: int, group: str) -> int:
    """The global rank of `rank`'s group's rank 0: 0 for the all-ranks group, else the first of its half."""
    return 0 if group == "side" else (0 if rank < world_size // 2 else world_size // 2)


@pytest.mark.task("06-rank0-broadcast/receive-step")
@pytest.mark.timeout(180)
@pytest.mark.parametrize("group", ["side", "half"], ids=["all-ranks-group", "half-groups"])
def test_receive_step(run_ranks, world_size, group):
    steps = _steps()
    ipc_dir = str(sandbox.current().writable_dir("ipc"))  # one set of sockets per group under it
    # only each group's rank 0 is handed the payloads; the others must learn them from it
    results = run_ranks([adapters.receive_step(ipc_dir, steps if rank == _group_root(rank, world_size, group)
                                               else [[] for _ in steps], group) for rank in range(world_size)])
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
                problems.append(f"rank {rank}, step {step}: got {len(got)} payloads of sizes {sizes}, "
                                f"expected its group's rank 0's {len(expected)} of sizes {[len(p) for p in expected]}")
                break
    if problems:
        raise WrongAnswer(f"receive_step at world size {world_size}, {group} group(s):\n  " + "\n  ".join(problems))
    members = world_size if group == "side" else world_size // 2
    # one count per step from the group's rank 0; nothing at all in a group of one (tp = 1)
    expected = {(BROADCAST, group): len(steps)} if members > 1 else {}
    assert_collectives(f"receive_step, {len(steps)} steps, tp={members}", results, expected)
