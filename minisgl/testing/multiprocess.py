"""Run a function on N real ranks (child processes joined in a gloo group) and collect results.

Used by the engine's tests and the chapter notebooks (chapters 01-09): every call gets its own
rendezvous file (no port that a parallel test could take) and a timeout, and a failing rank's
exception comes back with its rank number instead of a hang. Each rank joins its group as an
engine's rank does (`minisgl.distributed.join`), on gloo.
"""

from __future__ import annotations

import multiprocessing as mp
import pickle
import queue
import shutil
import tempfile
import time
import traceback
from collections.abc import Callable
from typing import Any

import torch

from minisgl.distributed import DistributedInfo, barrier, destroy_distributed, join
from minisgl.distributed.rendezvous import file_init_method
from minisgl.process.start import child_context, start_process


class RankFailed(RuntimeError):
    """A rank raised, died, or ran out of time; the message names the rank."""


def _rank_main(fn: Callable[..., Any], rank: int, world_size: int, init_method: str, results: mp.Queue,
               args: tuple) -> None:
    try:
        torch.set_num_threads(1)
        groups = join(DistributedInfo(rank, world_size), init_method, torch.device("cpu"), "gloo", timeout_s=60)
        if groups.cpu is not None:
            barrier(groups.cpu)  # everyone is in the group before any rank's logic starts
        # pickled here: a tensor put on an mp.Queue as-is travels as a shared-memory handle that
        # dies with this process, before the parent may have read it
        results.put((rank, "ok", pickle.dumps(fn(rank, world_size, *args))))
    except BaseException as error:  # noqa: BLE001 - the parent reports it with the rank
        results.put((rank, "error", (type(error).__name__, str(error), traceback.format_exc())))
    finally:
        destroy_distributed()


def run_ranks(fn: Callable[..., Any], world_size: int, *args: Any, timeout_s: float = 120.0) -> list[Any]:
    """Call `fn(rank, world_size, *args)` on `world_size` gloo ranks; return results in rank order.

    `fn` must be importable (defined at module level): each rank imports it by name. Raises
    `RankFailed` naming the first rank that raised, died, or exceeded `timeout_s`.
    """
    ctx = child_context()
    results: mp.Queue = ctx.Queue()
    store_dir = tempfile.mkdtemp(prefix="minisgl-ranks-")
    procs = [  # each with the caller's environment and output of now (minisgl/process/start.py)
        start_process(ctx, _rank_main, (fn, rank, world_size, file_init_method(store_dir), results, args), daemon=True)
        for rank in range(world_size)
    ]
    collected: dict[int, Any] = {}
    deadline = time.monotonic() + timeout_s
    try:
        while len(collected) < world_size:
            try:
                rank, status, payload = results.get(timeout=0.2)
            except queue.Empty:
                missing = sorted(set(range(world_size)) - set(collected))
                dead = [r for r in missing if procs[r].exitcode is not None]
                if dead:
                    code = procs[dead[0]].exitcode
                    raise RankFailed(f"rank {dead[0]} died (exit code {code}) without a result") from None
                if time.monotonic() > deadline:
                    raise RankFailed(f"ranks {missing} gave no result within {timeout_s:.0f} s") from None
                continue
            if status == "error":
                name, message, trace = payload
                raise RankFailed(f"rank {rank} raised {name}: {message}\n{trace}")
            collected[rank] = pickle.loads(payload)
    finally:
        for proc in procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
        shutil.rmtree(store_dir, ignore_errors=True)
    return [collected[rank] for rank in range(world_size)]


