"""Grades chapter 06 on real ranks with the engine's ZmqIO (real ZMQ sockets over ipc://): four
scheduler steps, one of them empty, with encoded requests of very different sizes."""

from __future__ import annotations

import pytest

from exercises.grader import adapters
from exercises.grader.checks import values
from exercises.grader.outcomes import WrongAnswer
from exercises.grader.ranks import RankContext
from minisgl.core import SamplingParams
from minisgl.distributed import get_tp_info
from minisgl.message import AbortRequest, GenerateRequest, IpcAddresses, encode_message
from minisgl.scheduler.io import ZmqIO


def _steps() -> list[list[bytes]]:
    def request(uid: int, length: int) -> bytes:
        return encode_message(GenerateRequest(uid, list(range(length)), SamplingParams(max_tokens=4)))

    return [[request(1, 3), request(2, 20_000), request(3, 1)], [], [encode_message(AbortRequest(2))],
            [request(4, 7), request(5, 2)]]


def _receive_job(ctx: RankContext, impl: str, ipc_dir: str, steps: list[list[bytes]]) -> list[list[bytes]]:
    io = ZmqIO(get_tp_info(), ctx.cpu_group, IpcAddresses.in_dir(ipc_dir))
    try:
        return [adapters.receive_step(impl, io, list(step) if ctx.rank == 0 else []) for step in steps]
    finally:
        io.close()


@pytest.mark.task("06-rank0-broadcast/receive-step")
@pytest.mark.timeout(180)
def test_receive_step(impl, run_ranks, world_size, tmp_path):
    steps = _steps()
    results = values(run_ranks(_receive_job, impl=impl, ipc_dir=str(tmp_path), steps=steps))
    problems = []
    for rank, got_steps in enumerate(results):
        for step, (got, expected) in enumerate(zip(got_steps, steps)):
            if list(got) != expected:
                got = got if isinstance(got, list) else []
                problems.append(f"rank {rank}, step {step}: got {len(got)} payloads of sizes {[len(p) for p in got]}, "
                                f"expected rank 0's {len(expected)} of sizes {[len(p) for p in expected]}")
                break
    if problems:
        raise WrongAnswer(f"receive_step at world size {world_size}:\n  " + "\n  ".join(problems))
