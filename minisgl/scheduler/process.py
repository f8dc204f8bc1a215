"""Scheduler rank processes (chapter 02): start one per TP rank in a `ChildGroup`, the body each
runs, and how a launcher stops them. The offline `LLM` (tp > 1) and the server both use it."""

from __future__ import annotations

import dataclasses
import os
import time
from multiprocessing.process import BaseProcess

from minisgl.distributed import DistributedInfo
from minisgl.distributed.loopback import file_init_method
from minisgl.engine.engine import Engine
from minisgl.message import IpcAddresses, PushQueue, ShutdownRequest
from minisgl.process import ChildGroup, LaunchError, Ready

from .config import SchedulerConfig
from .io import ZmqIO
from .scheduler import Scheduler


def max_cpu_ranks() -> int:
    """More ranks than this on CPU would only thrash: 4 processes per core."""
    return max(8, 4 * (os.cpu_count() or 1))


def check_tp_fits_machine(tp_size: int, device: str) -> None:
    if device == "cpu" and tp_size > max_cpu_ranks():
        raise LaunchError(
            f"tp_size={tp_size} needs {tp_size} processes; this machine runs at most {max_cpu_ranks()} CPU ranks"
            " (4 per core); use a smaller tp size"
        )


def spawn_ranks(group: ChildGroup, config: SchedulerConfig, addrs: IpcAddresses) -> list[BaseProcess]:
    """Start rank r = 0 .. tp - 1 as child `minisgl-TP{r}-scheduler` of `group`, without waiting
    for their acks (`group.wait_ready` does, together with any other children)."""
    tp_size = config.tp_info.size
    check_tp_fits_machine(tp_size, config.device)
    # the ranks meet on a file: a TCP store would listen on every interface
    config = dataclasses.replace(config, dist_init_addr=file_init_method(group.ipc_dir))
    return [
        group.spawn(f"minisgl-TP{rank}-scheduler", run_scheduler,
                    dataclasses.replace(config, tp_info=DistributedInfo(rank, tp_size)), addrs)
        for rank in range(tp_size)
    ]


def run_scheduler(config: SchedulerConfig, addrs: IpcAddresses, ready: Ready) -> None:
    """The body of rank `config.tp_info.rank`: build the engine and the sockets, ack, loop."""
    engine = Engine(config)
    io = ZmqIO(config.tp_info, engine.cpu_group, addrs)
    scheduler = Scheduler(config, engine, io)
    ready(f"{engine.kv_pool.allocator.num_pages} KV pages")
    try:
        scheduler.run_forever()
    finally:
        io.close()
        engine.shutdown()


def shut_down_ranks(ranks: list[BaseProcess], addrs: IpcAddresses, timeout_s: float) -> None:
    """Ask the ranks to leave their loop: a `ShutdownRequest` to rank 0, which broadcasts it, so
    every rank exits cleanly. Waits up to `timeout_s` in total; whatever still runs is the
    caller's to stop."""
    requests = PushQueue(addrs.scheduler)
    requests.put(ShutdownRequest())
    requests.close(linger_ms=1000)  # this message must leave, even as we close
    deadline = time.monotonic() + timeout_s
    for process in ranks:
        process.join(max(0.0, deadline - time.monotonic()))
