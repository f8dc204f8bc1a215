"""Chapter 02 (launch): start one process per rank and wait until every rank says it is ready.

The engine's launcher (minisgl/process/group.py) spawns one scheduler process per TP rank, then
waits on an ack queue: each rank puts ("ready", key, detail) when its model is loaded, or
("error", key, detail) when it could not start (the engine's key is the process name; here it is
the rank). A launcher that does not wait serves requests to ranks that are not there; one that
waits forever hangs when a rank dies; one that gives up but leaves the other ranks running leaks
processes.
"""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Callable
from multiprocessing.process import BaseProcess

# target(rank, world_size, acks): the body of one rank; it puts its ack on `acks`.
RankTarget = Callable[[int, int, "mp.Queue"], None]


def start_ranks(target: RankTarget, world_size: int, timeout_s: float) -> list[BaseProcess]:
    """Task 02-launch/start-ranks: spawn `world_size` ranks and return them once all are ready.

    Contract:
    - start each rank with the "spawn" start method (`multiprocessing.get_context("spawn")`: a
      fresh interpreter, no forked torch, CUDA or ZMQ state), as a child of this process; rank r
      runs target(r, world_size, acks) with one queue `acks` shared by all ranks;
    - return the processes, in rank order, only after every rank has put ("ready", rank, ...);
    - raise RuntimeError (or a subclass) whose message names the rank when a rank acks
      ("error", rank, detail) (include the detail) or exits before acking; notice a dead rank
      promptly, not at the timeout;
    - `timeout_s` is one deadline counted from the call's start, not a fresh wait per ack: when it
      passes first, raise RuntimeError naming the ranks that have not acked;
    - before raising, stop every process you started: none may be left running;
    - raise ValueError, before starting anything, when world_size < 1 or timeout_s <= 0.

    May use: the standard library (multiprocessing, queue, time). Nothing of minisgl (its
    ChildGroup and wait_for_acks, in minisgl/process/group.py, are the engine's answer to this task).
    """
    raise NotImplementedError("02-launch/start-ranks")
