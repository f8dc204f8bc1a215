"""Grades chapter 06 on real ranks with the engine's ZmqIO (real ZMQ sockets over ipc://): four
scheduler steps, one of them empty, with encoded requests of very different sizes. The CPU group is
never the default one: all ranks in a group of their own, or two halves (at world size 2, groups of
one: tp = 1), where the second half's rank 0 is not global rank 0."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

from exercises.grader import adapters
from exercises.grader.checks import assert_collectives, values
from exercises.grader.outcomes import WrongAnswer
from exercises.grader.ranks import RankContext
from minisgl.core import SamplingParams
from minisgl.distributed import DistributedInfo
from minisgl.message import AbortRequest, GenerateRequest, IpcAddresses, encode_message
from minisgl.process.group import make_ipc_dir
from minisgl.scheduler.io import ZmqIO

BROADCAST = "torch.distributed.broadcast"


def _steps() -> list[list[bytes]]:
    def request(uid: int, length: int) -> bytes:
        return encode_message(GenerateRequest(uid, list(range(length)), SamplingParams(max_tokens=4)))

    return [[request(1, 3), request(2, 20_000), request(3, 1)], [], [encode_message(AbortRequest(2))],
            [request(4, 7), request(5, 2)]]


def _receive_job(ctx: RankContext, impl: str, ipc_dir: str, steps: list[list[bytes]], group: str) -> dict:
    import torch.distributed as dist

    cpu_group = ctx.side_group if group == "side" else ctx.half_group
    members = dist.get_world_size(cpu_group)
    root = dist.get_global_rank(cpu_group, 0)
    tp_info = DistributedInfo(dist.get_rank(cpu_group), members)
    where = os.path.join(ipc_dir, f"group{root}")  # one set of sockets per group
    os.makedirs(where, exist_ok=True)
    io = ZmqIO(tp_info, cpu_group, IpcAddresses.in_dir(where))
    try:
        got = []
        for step in steps:
            pulled = list(step) if tp_info.is_primary else []
            got.append(adapters.receive_step(impl, io, pulled))
            if pulled != (list(step) if tp_info.is_primary else []):
                raise WrongAnswer(f"receive_step modified the list of payloads it was given (rank {ctx.rank})")
        return {"steps": got, "members": members}
    finally:
        io.close()


@pytest.fixture
def ipc_dir() -> Iterator[str]:
    """A short folder for the sockets (an ipc:// path must fit in 107 bytes, a test's tmp_path may not)."""
    path = make_ipc_dir()
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.task("06-rank0-broadcast/receive-step")
@pytest.mark.timeout(180)
@pytest.mark.parametrize("group", ["side", "half"], ids=["all-ranks-group", "half-groups"])
def test_receive_step(impl, run_ranks, world_size, ipc_dir, group):
    steps = _steps()
    results = run_ranks(_receive_job, impl=impl, ipc_dir=ipc_dir, steps=steps, group=group)
    problems = []
    for rank, result in enumerate(values(results)):
        for step, (got, expected) in enumerate(zip(result["steps"], steps)):
            if not isinstance(got, list) or got != expected:
                got = got if isinstance(got, list) else []
                problems.append(f"rank {rank}, step {step}: got {len(got)} payloads of sizes {[len(p) for p in got]}, "
                                f"expected its group's rank 0's {len(expected)} of sizes {[len(p) for p in expected]}")
                break
    if problems:
        raise WrongAnswer(f"receive_step at world size {world_size}, {group} group(s):\n  " + "\n  ".join(problems))
    members = values(results)[0]["members"]
    # one count per step from the group's rank 0; nothing at all in a group of one (tp = 1)
    expected = {(BROADCAST, group): len(steps)} if members > 1 else {}
    assert_collectives(f"receive_step, {len(steps)} steps, tp={members}", results, expected)
