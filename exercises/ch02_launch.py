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

    - Use the "spawn" start method (fresh interpreters: no forked torch, CUDA or ZMQ state); rank r
      runs target(r, world_size, acks) with one queue `acks` shared by all ranks.
    - Return the processes, in rank order, only after every rank has put ("ready", rank, ...).
    - Raise RuntimeError (or a subclass) whose message names the rank when a rank acks
      ("error", rank, detail) (include the detail) or exits before acking, and names the missing
      ranks when `timeout_s` passes first. Notice a dead rank promptly, not at the timeout.
    - Before raising, stop every process you started: no orphans.
    """
    raise NotImplementedError("02-launch/start-ranks")
