"""Chapter 02 reference: spawn the ranks, then let the engine's `wait_for_acks` wait for their acks
(timeout, dead-rank check, error acks) and stop them all on failure (minisgl/process/group.py)."""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Callable
from multiprocessing.process import BaseProcess

from minisgl.process import stop_processes, wait_for_acks

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
    try:
        wait_for_acks(dict(enumerate(processes)), acks, timeout_s)  # the ranks ack with their rank as key
    except BaseException:
        stop_processes(processes)  # terminate every rank (then kill): no orphans
        raise
    return processes
