"""Chapter 02 reference: spawn the ranks, then wait for their acks against one deadline while
watching for ranks that die first; on any failure stop them all (minisgl/process/group.py does the
same for the engine's schedulers)."""

from __future__ import annotations

import multiprocessing as mp
import queue
import time
from collections.abc import Callable
from multiprocessing.process import BaseProcess

RankTarget = Callable[[int, int, "mp.Queue"], None]
POLL_S = 0.1  # how often a dead rank is looked for while no ack arrives


def start_ranks(target: RankTarget, world_size: int, timeout_s: float) -> list[BaseProcess]:
    if world_size < 1 or timeout_s <= 0:
        raise ValueError(f"start_ranks needs world_size >= 1 and timeout_s > 0, got {world_size} and {timeout_s}")
    deadline = time.monotonic() + timeout_s  # one deadline for every ack
    ctx = mp.get_context("spawn")
    acks = ctx.Queue()
    processes = [ctx.Process(target=target, args=(rank, world_size, acks), name=f"rank{rank}")
                 for rank in range(world_size)]
    try:
        for process in processes:
            process.start()
        _wait_for_acks(processes, acks, deadline, timeout_s)
    except BaseException:
        _stop(processes)
        raise
    return processes


def _wait_for_acks(processes: list[BaseProcess], acks: mp.Queue, deadline: float, timeout_s: float) -> None:
    ready: set[int] = set()
    while len(ready) < len(processes):
        try:
            status, rank, detail = acks.get(timeout=max(0.0, min(POLL_S, deadline - time.monotonic())))
        except queue.Empty:
            dead = [rank for rank, p in enumerate(processes) if rank not in ready and p.exitcode is not None]
            if dead:
                raise RuntimeError(f"rank {dead[0]} exited with code {processes[dead[0]].exitcode} before it acked")
            if time.monotonic() >= deadline:
                missing = sorted(set(range(len(processes))) - ready)
                raise RuntimeError(f"ranks {missing} did not ack within {timeout_s:g} s") from None
            continue
        if status == "error":
            raise RuntimeError(f"rank {rank} failed to start: {detail}")
        ready.add(rank)


def _stop(processes: list[BaseProcess]) -> None:
    """Terminate every started process; kill the ones that do not stop within a second."""
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        if process.pid is not None:
            process.join(1.0)
            if process.is_alive():
                process.kill()
                process.join()
