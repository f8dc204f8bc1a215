"""Code that runs inside each rank for chapter 06: minisgl's ZmqIO receiving in lock-step, and a
scheduler fed on purpose with different messages per rank, to see what breaks."""

from __future__ import annotations

import sys
from pathlib import Path

import torch.distributed as dist

from minisgl.distributed import get_tp_info
from minisgl.message import GenerateRequest, IpcAddresses
from minisgl.scheduler import LocalIO, Scheduler, ZmqIO

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from course import engine_on_this_rank  # noqa: E402


def receive_all(rank: int, world_size: int, addrs: IpcAddresses, expected: int) -> list[list[int]]:
    """Call ZmqIO.receive until `expected` messages came; return the uids each call returned.

    Rank 0 pulls from the frontend; the others only ever hear from rank 0. Every rank stops at
    the same step because every rank saw the same counts.
    """
    io = ZmqIO(get_tp_info(), dist.group.WORLD, addrs)
    steps: list[list[int]] = []
    while sum(map(len, steps)) < expected:
        steps.append([message.uid for message in io.receive(blocking=True)])
    io.close()
    return steps


def serve(
    rank: int, world_size: int, model_dir: Path, init_addr: str, inbox_per_rank: list[list[GenerateRequest]]
) -> dict[int, list[int]]:
    """A real engine + scheduler on this rank, with a LocalIO we fill by hand instead of ZmqIO.

    Handing every rank the same list is what the broadcast guarantees; handing them different
    lists shows why it has to.
    """
    engine = engine_on_this_rank(rank, world_size, model_dir, init_addr)
    io = LocalIO()
    io.inbox.extend(inbox_per_rank[rank])
    scheduler = Scheduler(engine.config, engine, io)
    scheduler.step()  # takes the inbox
    while scheduler.has_work:
        scheduler.step()
    engine.shutdown()
    tokens: dict[int, list[int]] = {}
    for output in io.outbox:
        tokens.setdefault(output.uid, []).extend(output.token_ids)
    return tokens
