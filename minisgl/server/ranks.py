"""Start one scheduler process per TP rank, wait for every rank's ack with a timeout, watch them,
and stop them all (chapter 02). Used by the offline `LLM` and by the server."""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import os
import queue
import shutil
import tempfile
import time
from multiprocessing.process import BaseProcess

from minisgl.distributed import DistributedInfo
from minisgl.utils import free_port
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


class RankGroup:
    """The scheduler processes of one run, and the ipc:// addresses to reach rank 0."""

    def __init__(self, config: SchedulerConfig, processes: list[BaseProcess], ipc_dir: str) -> None:
        self.config = config
        self.processes = processes
        self._ipc_dir = ipc_dir

    @classmethod
    def start(cls, config: SchedulerConfig, timeout_s: float = START_TIMEOUT_S) -> RankGroup:
        tp_size = config.tp_info.size
        check_tp_fits_machine(tp_size, config.device)
        ipc_dir = tempfile.mkdtemp(prefix="minisgl-")
        config = dataclasses.replace(
            config,
            dist_init_addr=f"tcp://127.0.0.1:{free_port()}",
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
        group = cls(config, processes, ipc_dir)
        try:
            group._wait_for_acks(acks, timeout_s)
        except BaseException:
            group.shutdown()
            raise
        return group

    def _wait_for_acks(self, acks: mp.Queue, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        ready: set[int] = set()
        while len(ready) < len(self.processes):
            try:
                status, rank, detail = acks.get(timeout=0.2)
            except queue.Empty:
                if time.monotonic() > deadline:
                    missing = sorted(set(range(len(self.processes))) - ready)
                    raise LaunchError(f"ranks {missing} did not start within {timeout_s:.0f} s") from None
                self.check_alive()
                continue
            if status == "error":
                raise LaunchError(f"rank {rank} failed to start: {detail}")
            ready.add(rank)

    def check_alive(self) -> None:
        for process in self.processes:
            if process.exitcode is not None:
                raise LaunchError(f"{process.name} exited with code {process.exitcode}")

    def shutdown(self, timeout_s: float = 5.0) -> None:
        """Terminate every rank (SIGTERM, then SIGKILL after `timeout_s`) and remove the ipc dir."""
        for process in self.processes:
            if process.is_alive():
                process.terminate()
        deadline = time.monotonic() + timeout_s
        for process in self.processes:
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                process.kill()
                process.join()
        shutil.rmtree(self._ipc_dir, ignore_errors=True)
