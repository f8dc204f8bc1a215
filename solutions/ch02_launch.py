"""Chapter 02 reference: spawn the ranks, then let the engine's RankGroup wait for their acks
(timeout, dead-rank check, error acks) and stop them all on failure (minisgl/server/ranks.py)."""

from __future__ import annotations

import multiprocessing as mp
import shutil
import tempfile
from collections.abc import Callable
from multiprocessing.process import BaseProcess

from minisgl.server.ranks import RankGroup

RankTarget = Callable[[int, int, "mp.Queue"], None]


def start_ranks(target: RankTarget, world_size: int, timeout_s: float) -> list[BaseProcess]:
    ctx = mp.get_context("spawn")
    acks = ctx.Queue()
    processes = [
        ctx.Process(target=target, args=(rank, world_size, acks), name=f"minisgl-TP{rank}")
        for rank in range(world_size)
    ]
    for process in processes:
        process.start()
    # RankGroup also owns the ipc:// directory of a real run; here it is an empty placeholder.
    ipc_dir = tempfile.mkdtemp(prefix="minisgl-launch-")
    group = RankGroup(config=None, processes=processes, ipc_dir=ipc_dir, acks=acks)
    try:
        group._wait_for_acks(timeout_s)
    except BaseException:
        group.shutdown()  # terminate every rank (then kill), remove the directory
        raise
    shutil.rmtree(ipc_dir, ignore_errors=True)
    return processes
