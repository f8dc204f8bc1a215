"""Real multi-rank runs for the grader: `world_size` spawned processes joined in one
torch.distributed group, reused from test to test, and killed and rebuilt when a job hangs.

A job is a module-level function `job(ctx: RankContext, **kwargs)` that every rank runs at the same
time; each rank's return value (CPU tensors, plain data) comes back with the collectives the
learner's function made (collectives.py). Backends follow the course rule: gloo on CPU; NCCL when
there is a GPU per rank; gloo on CUDA tensors when several ranks share one GPU.
"""

from __future__ import annotations

import importlib
import multiprocessing as mp
import os
import pickle
import queue
import threading
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable

from minisgl.utils import free_port

from .collectives import NOT_IN_A_COLLECTIVE, Collective, describe
from .outcomes import NotAttempted, WrongAnswer

START_TIMEOUT_S = 120.0  # spawning and importing torch in every rank, on a busy 2-core machine
ERROR_GRACE_S = 3.0  # after one rank fails, how long the others get before they count as stuck


@dataclass(frozen=True)
class RankContext:
    """What a job knows about the rank it runs on, and the process groups it may hand out."""

    rank: int
    world_size: int
    device: Any  # torch.device: cpu, or the GPU this rank uses
    cpu_group: Any  # a gloo ProcessGroup of all ranks for CPU control messages (WORLD under gloo)
    side_group: Any  # another gloo group of all ranks: a function given it must not use WORLD
    half_group: Any  # a gloo group of this rank's half (ranks split in two; a group of one at world size 2)


@dataclass(frozen=True)
class RankResult:
    value: Any
    collectives: list[Collective]  # made by the learner's function, in order

    def count(self, api: str) -> int:
        return sum(c.api == api for c in self.collectives)


class RanksFailed(WrongAnswer):
    """Some rank raised or hung; the message has one line per rank."""


def choose_backend(world_size: int) -> tuple[str, str]:
    """(device type, tensor backend) for `world_size` ranks on this machine."""
    import torch

    if not torch.cuda.is_available():
        return "cpu", "gloo"
    return "cuda", "nccl" if torch.cuda.device_count() >= world_size else "gloo"


@contextmanager
def tp_view(rank: int, size: int) -> Iterator[None]:
    """Let this process see itself as rank `rank` of `size` (e.g. tp = 1 inside a 2-rank pool)."""
    from minisgl.distributed import get_tp_info, set_tp_info

    before = get_tp_info()
    set_tp_info(rank, size)
    try:
        yield
    finally:
        set_tp_info(before.rank, before.size)


class RankPool:
    """`world_size` ranks waiting for jobs; `run` sends one job to all of them."""

    def __init__(self, world_size: int, job_timeout_s: float) -> None:
        self.world_size = world_size
        self.job_timeout_s = job_timeout_s
        self.device_type, self.backend = choose_backend(world_size)
        ctx = mp.get_context("spawn")
        self._jobs = [ctx.Queue() for _ in range(world_size)]  # one inbox per rank
        self._results = ctx.Queue()
        self._progress = ctx.Array("i", 2 * world_size)  # per rank: collectives entered, the one it is in
        self._next_job = 0
        init_method = f"tcp://127.0.0.1:{free_port()}"
        self._processes = [
            ctx.Process(target=_rank_main, name=f"grader-rank{rank}-of-{world_size}", daemon=True,
                        args=(rank, world_size, init_method, self.device_type, self.backend,
                              self._jobs[rank], self._results, self._progress, os.getpid()))
            for rank in range(world_size)
        ]
        for process in self._processes:
            process.start()
        try:
            self._wait_ready()
        except BaseException:
            self.close()
            raise

    def _wait_ready(self) -> None:
        ready: set[int] = set()
        deadline = time.monotonic() + START_TIMEOUT_S
        while len(ready) < self.world_size:
            try:
                _, rank, status = self._results.get(timeout=0.5)
            except queue.Empty:
                dead = [p.name for p in self._processes if p.exitcode is not None]
                if dead or time.monotonic() > deadline:
                    raise RuntimeError(f"grader ranks did not start ({self.backend}): dead {dead}, "
                                       f"ready {sorted(ready)}") from None
                continue
            if status != "ready":
                raise RuntimeError(f"grader rank {rank} failed to join the group: {status}")
            ready.add(rank)

    @property
    def alive(self) -> bool:
        return all(p.is_alive() for p in self._processes)

    def run(self, job: Callable[..., Any], **kwargs: Any) -> list[RankResult]:
        """Run `job(ctx, **kwargs)` on every rank; results in rank order, or one exception for all."""
        job_id, self._next_job = self._next_job, self._next_job + 1
        message = (job_id, job.__module__, job.__qualname__, pickle.dumps(kwargs))
        for inbox in self._jobs:
            inbox.put(message)
        replies: dict[int, tuple] = {}
        deadline = time.monotonic() + self.job_timeout_s
        while len(replies) < self.world_size:
            if any(reply[0] == "error" for reply in replies.values()):
                deadline = min(deadline, time.monotonic() + ERROR_GRACE_S)
                if time.monotonic() > deadline:
                    break
            try:
                reply_id, rank, data = self._results.get(timeout=0.2)
            except queue.Empty:
                if time.monotonic() > deadline or not self.alive:
                    break
                continue
            if reply_id == job_id:
                replies[rank] = pickle.loads(data)
        progress = list(self._progress)  # where the stuck ranks are, before they are killed
        if len(replies) < self.world_size:
            self.close()  # some rank is stuck (or dead): this pool cannot be trusted again
        return _collect(self.world_size, replies, progress, self.job_timeout_s)

    def close(self) -> None:
        for inbox, process in zip(self._jobs, self._processes):
            if process.is_alive():
                try:
                    inbox.put(None)
                except (OSError, ValueError):
                    pass
        deadline = time.monotonic() + 0.5
        for process in self._processes:
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():  # stuck in a collective, or slow to tear its group down
                process.kill()
                process.join()


def _collect(world_size: int, replies: dict[int, tuple], progress: list[int], timeout_s: float) -> list[RankResult]:
    errors = {rank: reply[1] for rank, reply in replies.items() if reply[0] == "error"}
    missing = [rank for rank in range(world_size) if rank not in replies]
    if not errors and not missing:
        return [RankResult(replies[rank][1], replies[rank][2]) for rank in range(world_size)]
    if errors and not missing and all(e["not_implemented"] for e in errors.values()):
        raise NotAttempted(f"still raises NotImplementedError (on {len(errors)} of {world_size} ranks)")
    lines = [f"{len(errors) + len(missing)} of {world_size} ranks failed"]
    for rank in sorted(errors):
        lines.append(f"  rank {rank} raised {errors[rank]['message']}")
        lines.extend("    " + line for line in errors[rank]["where"])
    lines.extend(_hang_lines(missing, replies, progress, timeout_s))
    raise RanksFailed("\n".join(lines))


def _hang_lines(missing: list[int], replies: dict[int, tuple], progress: list[int], timeout_s: float) -> list[str]:
    """Who is stuck where, and which ranks never joined the collective a stuck rank waits in."""
    lines = []
    for rank in missing:
        entered, current = progress[2 * rank], progress[2 * rank + 1]
        if current == NOT_IN_A_COLLECTIVE:
            where = f"outside any collective, after {entered} collective(s)"
        else:
            where = f"in its collective #{entered} ({describe(current)})"
        lines.append(f"  rank {rank} did not finish within {timeout_s:.0f} s: it waits {where}; the grader killed it")
    waited = max((progress[2 * r] for r in missing if progress[2 * r + 1] != NOT_IN_A_COLLECTIVE), default=0)
    for rank in sorted(replies):
        if progress[2 * rank] < waited:
            lines.append(f"  rank {rank} returned after {progress[2 * rank]} collective(s): it never joined "
                         f"collective #{waited}, which the stuck rank(s) wait in")
    return lines


def _rank_main(rank: int, world_size: int, init_method: str, device_type: str, backend: str,
               jobs: Any, results: Any, progress: Any, parent_pid: int) -> None:
    """Body of one grader rank: join the group, then run jobs until told to stop."""
    threading.Thread(target=_exit_with_parent, args=(parent_pid,), daemon=True).start()
    import torch
    import torch.distributed as dist

    from minisgl.distributed import enable_torch_distributed, set_tp_info

    from . import collectives

    torch.set_num_threads(1)  # ranks share few cores
    try:
        device = torch.device("cpu")
        if device_type == "cuda":
            device = torch.device("cuda", rank % torch.cuda.device_count())
            torch.cuda.set_device(device)
        dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=world_size,
                                timeout=timedelta(seconds=120))
        ctx = _make_context(rank, world_size, device, backend)
        set_tp_info(rank, world_size)
        enable_torch_distributed(dist.group.WORLD)
        recorder = collectives.Recorder(rank, progress, {"WORLD": dist.group.WORLD, "cpu": ctx.cpu_group,
                                                         "side": ctx.side_group, "half": ctx.half_group})
        collectives.install(recorder)  # before any learner module is imported
    except Exception as error:  # reported to the parent, which names this rank
        results.put((None, rank, f"{type(error).__name__}: {error}"))
        return
    results.put((None, rank, "ready"))
    while (message := jobs.get()) is not None:
        job_id, module, qualname, payload = message
        recorder.start_job()
        try:
            job = getattr(importlib.import_module(module), qualname)
            value = job(ctx, **pickle.loads(payload))
            data = pickle.dumps(("ok", value, recorder.log))
        except BaseException as error:
            data = pickle.dumps(("error", _describe(error)))
        results.put((job_id, rank, data))
    dist.destroy_process_group()


def _make_context(rank: int, world_size: int, device: Any, backend: str) -> RankContext:
    """The groups every job may use; every rank creates them, in the same order."""
    import torch.distributed as dist

    cpu_group = dist.new_group(backend="gloo") if backend == "nccl" else dist.group.WORLD
    side_group = dist.new_group(backend="gloo")
    half_group = None
    halves = (list(range(world_size // 2)), list(range(world_size // 2, world_size)))
    for members in halves if world_size > 1 else ():
        group = dist.new_group(members, backend="gloo")
        if rank in members:
            half_group = group
    return RankContext(rank, world_size, device, cpu_group, side_group, half_group)


def _describe(error: BaseException) -> dict[str, Any]:
    """A picklable account of an exception: message, and the last frames outside the grader."""
    frames = traceback.extract_tb(error.__traceback__)
    grader = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # exercises/
    theirs = [f for f in frames if not f.filename.startswith((grader + "/grader", grader + "/tests"))]
    frames = (theirs or frames)[-3:]
    return {
        "not_implemented": isinstance(error, (NotImplementedError, NotAttempted)),
        "message": f"{type(error).__name__}: {error}".strip(),
        "where": [f"{os.path.relpath(f.filename)}:{f.lineno} in {f.name}: {f.line}" for f in frames],
    }


def _exit_with_parent(parent_pid: int) -> None:
    """No orphans: a rank whose grader process disappeared (even by kill -9) exits too."""
    while os.getppid() == parent_pid:
        time.sleep(0.5)
    os._exit(1)


class RankPools:
    """One live pool per world size, created on first use and replaced after a hang."""

    def __init__(self, job_timeout_s: float) -> None:
        self.job_timeout_s = job_timeout_s
        self._pools: dict[int, RankPool] = {}

    def run(self, job: Callable[..., Any], world_size: int, **kwargs: Any) -> list[RankResult]:
        pool = self._pools.get(world_size)
        if pool is None or not pool.alive:
            pool = self._pools[world_size] = RankPool(world_size, self.job_timeout_s)
        return pool.run(job, **kwargs)

    def close(self) -> None:
        for pool in self._pools.values():
            pool.close()
        self._pools.clear()
