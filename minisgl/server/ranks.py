"""Start one scheduler process per TP rank, wait for every rank's ack with a timeout, watch them,
and stop them all (chapter 02). Used by the offline `LLM` and by the server."""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import os
import queue
import shutil
import signal
import sys
import time
from multiprocessing.process import BaseProcess

from minisgl.distributed import DistributedInfo
from minisgl.distributed.loopback import file_init_method
from minisgl.utils import make_ipc_dir
from minisgl.scheduler.config import SchedulerConfig
from minisgl.scheduler.process import run_scheduler_process

START_TIMEOUT_S = 300.0


class LaunchError(RuntimeError):
    """A rank failed to start or died; the message names it."""


def max_cpu_ranks() -> int:
    """More ranks than this on CPU would only thrash: 4 processes per core."""
    return max(8, 4 * (os.cpu_count() or 1))


def check_tp_fits_machine(tp_size: int, device: str) -> None:
    if device == "cpu" and tp_size > max_cpu_ranks():
        raise LaunchError(
            f"tp_size={tp_size} needs {tp_size} processes; this machine runs at most {max_cpu_ranks()} CPU ranks"
            " (4 per core); use a smaller tp size"
        )


def check_main_is_importable() -> None:
    """A spawned process first re-imports the parent's main script by its path. A script read from
    standard input (`python - < script.py`) has no path, and each child would die with an opaque
    error: say so before spawning."""
    main_path = getattr(sys.modules["__main__"], "__file__", None)
    if main_path is not None and not os.path.exists(main_path):
        raise LaunchError(
            f"rank processes are spawned, and each re-imports the main script, but it was read from {main_path}: "
            "save it to a file and run `python script.py`"
        )


class RankGroup:
    """The scheduler processes of one run, and the ipc:// addresses to reach rank 0."""

    def __init__(self, config: SchedulerConfig, processes: list[BaseProcess], ipc_dir: str, acks: mp.Queue) -> None:
        self.config = config
        self.processes = processes
        self._ipc_dir = ipc_dir
        self._acks = acks  # ("ready" | "error", rank, detail) from each rank
        self._ready: set[int] = set()

    @classmethod
    def start(cls, config: SchedulerConfig, timeout_s: float = START_TIMEOUT_S) -> RankGroup:
        """Spawn every rank and wait until all of them are ready (or one fails: then stop them all)."""
        group = cls.spawn(config)
        try:
            group._wait_for_acks(timeout_s)
        except BaseException:
            group.shutdown()
            raise
        return group

    @classmethod
    def spawn(cls, config: SchedulerConfig) -> RankGroup:
        """Spawn every rank without waiting: the server starts its tokenizer processes meanwhile and
        then polls `poll_acks()` for both kinds together."""
        tp_size = config.tp_info.size
        check_tp_fits_machine(tp_size, config.device)
        check_main_is_importable()
        ipc_dir = make_ipc_dir()
        config = dataclasses.replace(
            config,
            dist_init_addr=file_init_method(ipc_dir),  # a file, not a TCP store open to the network
            requests_addr=f"ipc://{ipc_dir}/requests",
            outputs_addr=config.outputs_addr or f"ipc://{ipc_dir}/outputs",
            broadcast_addr=f"ipc://{ipc_dir}/broadcast",
        )
        ctx = mp.get_context("spawn")  # fresh interpreters: no forked torch/ZMQ state
        acks: mp.Queue = ctx.Queue()
        processes: list[BaseProcess] = []
        for rank in range(tp_size):
            rank_config = dataclasses.replace(config, tp_info=DistributedInfo(rank, tp_size))
            process = ctx.Process(target=run_scheduler_process, args=(rank_config, acks),
                                  name=f"minisgl-TP{rank}-scheduler", daemon=False)
            process.start()
            processes.append(process)
        return cls(config, processes, ipc_dir, acks)

    def _wait_for_acks(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not self.poll_acks(wait_s=0.2):
            if time.monotonic() > deadline:
                missing = sorted(set(range(len(self.processes))) - self._ready)
                raise LaunchError(f"ranks {missing} did not start within {timeout_s:.0f} s")
            self.check_alive()

    def poll_acks(self, wait_s: float = 0.0) -> bool:
        """Take the acks that arrived (waiting up to `wait_s` for the first); True once every rank is
        ready. A rank that reported an error raises `LaunchError` naming it."""
        while len(self._ready) < len(self.processes):
            try:
                status, rank, detail = self._acks.get(timeout=wait_s) if wait_s else self._acks.get_nowait()
            except queue.Empty:
                return False
            if status == "error":
                raise LaunchError(f"rank {rank} failed to start: {detail}")
            self._ready.add(rank)
            wait_s = 0.0
        return True

    def check_alive(self) -> None:
        culprit = first_dead(self.processes)
        if culprit is not None:
            raise LaunchError(describe_exit(culprit))

    def shutdown(self, timeout_s: float = 5.0) -> None:
        """Terminate every rank (SIGTERM, then SIGKILL after `timeout_s`) and remove the ipc dir."""
        stop_processes(self.processes, timeout_s)
        shutil.rmtree(self._ipc_dir, ignore_errors=True)


def first_dead(processes: list[BaseProcess]) -> BaseProcess | None:
    """A process that exited, if any. When one death causes others (a rank killed by a signal
    makes its peers' collectives fail), the one killed by a signal is the one to name."""
    dead = [p for p in processes if p.exitcode is not None]
    return min(dead, key=lambda p: p.exitcode >= 0) if dead else None


def describe_exit(process: BaseProcess) -> str:
    code = process.exitcode
    if code is not None and code < 0:
        return f"{process.name} (pid {process.pid}) was killed by {signal.Signals(-code).name}"
    return f"{process.name} (pid {process.pid}) exited with code {code}"


def stop_processes(processes: list[BaseProcess], timeout_s: float = 5.0) -> None:
    """SIGTERM every live process, wait up to `timeout_s` in total, then SIGKILL the stragglers."""
    for process in processes:
        if process.is_alive():
            process.terminate()
    deadline = time.monotonic() + timeout_s
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
        if process.is_alive():
            process.kill()
            process.join()
