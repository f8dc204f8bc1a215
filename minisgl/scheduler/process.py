"""Scheduler rank processes (chapter 02): start one per TP rank in a `ChildGroup` (this node's share
of them across machines, chapter 12; every stage's with pipeline parallelism, chapter 13), the body
each runs, and how a launcher stops them. The offline `LLM` (tp > 1) and the server both use it."""

from __future__ import annotations

import dataclasses
import os
import time
from multiprocessing.process import BaseProcess

from minisgl.distributed import DistributedInfo
from minisgl.distributed.peers import gather_peers, naming_dead_peers
from minisgl.distributed.rendezvous import file_init_method
from minisgl.engine.engine import Engine
from minisgl.message import IpcAddresses, PushQueue, ShutdownRequest
from minisgl.models.config import ModelConfig
from minisgl.models.stage import split_layers
from minisgl.process import ChildGroup, LaunchError, Ready

from .config import SchedulerConfig
from .io import SchedulerIO, ZmqIO
from .pipeline import DownstreamIO, PipelineScheduler
from .scheduler import Scheduler


def max_cpu_ranks() -> int:
    """More ranks than this on CPU would only thrash: 4 processes per core."""
    return max(8, 4 * (os.cpu_count() or 1))


def check_ranks_fit_machine(tp_size: int, device: str, dp_size: int = 1, nnodes: int = 1, pp_size: int = 1) -> None:
    """This machine runs pp * tp / nnodes ranks of each of the dp replicas; on CPU that must stay sane."""
    num_ranks = dp_size * pp_size * tp_size // nnodes
    if device == "cpu" and num_ranks > max_cpu_ranks():
        layout = f"tp_size={tp_size}" + (f" x pp_size={pp_size}" if pp_size > 1 else "")
        layout += f" x dp_size={dp_size}" if dp_size > 1 else ""
        layout += f" over {nnodes} nodes" if nnodes > 1 else ""
        raise LaunchError(
            f"{layout} needs {num_ranks} processes; this machine runs at most {max_cpu_ranks()} CPU ranks"
            f" (4 per core); use a smaller tp{', pp' if pp_size > 1 else ''}{' or dp' if dp_size > 1 else ''} size"
        )


def check_pipeline(model: ModelConfig, pp_size: int, dp_size: int = 1, nnodes: int = 1) -> None:
    """`pp_size` stages fit the model's layers, and this launch (chapter 13); a one-line ValueError."""
    split_layers(model.num_layers, pp_size)  # "pp_size=4 exceeds num_hidden_layers=2: ..."
    if pp_size > 1 and (dp_size > 1 or nnodes > 1):
        raise ValueError("pipeline parallelism runs on one machine without data parallelism here; "
                         "use pp_size > 1 with dp_size 1 and nnodes 1")


def spawn_ranks(
    group: ChildGroup, config: SchedulerConfig, addrs: IpcAddresses, node_rank: int = 0
) -> list[BaseProcess]:
    """Start the ranks of one TP group that live on node `node_rank` as children of `group`, without
    waiting for their acks (`group.wait_ready` does, together with any other children): all of them
    on one machine, `node_ranks` across machines (chapter 12); with pipeline parallelism, the TP
    group of every stage (chapter 13). On one machine the ranks meet on a store file in the run's ipc
    folder; across machines at the `dist_init_addr` every node was given."""
    tp_size, pp_size = config.tp_info.size, config.pp_info.size
    check_ranks_fit_machine(tp_size, config.device, config.dp_size, config.nnodes, pp_size)
    replica = f"DP{config.dp_rank}-" if config.dp_size > 1 else ""
    if config.nnodes == 1:  # the ranks meet on a file (each replica its own): nothing listens on a port
        store = f"torch-store-dp{config.dp_rank}" if config.dp_size > 1 else "torch-store"
        config = dataclasses.replace(config, dist_init_addr=file_init_method(group.ipc_dir, store))
    return [
        group.spawn(f"minisgl-{replica}{f'PP{stage}-' if pp_size > 1 else ''}TP{rank}-scheduler", run_scheduler,
                    dataclasses.replace(config, tp_info=DistributedInfo(rank, tp_size),
                                        pp_info=DistributedInfo(stage, pp_size)), addrs)
        for stage in range(pp_size)
        for rank in node_ranks(tp_size, config.nnodes, node_rank)
    ]


def node_ranks(tp_size: int, nnodes: int, node_rank: int) -> range:
    """The tp ranks node `node_rank` runs: one contiguous block of tp / nnodes (chapter 12)."""
    per_node = tp_size // nnodes
    return range(node_rank * per_node, (node_rank + 1) * per_node)


def run_scheduler(config: SchedulerConfig, addrs: IpcAddresses, ready: Ready) -> None:
    """The body of rank `config.tp_info.rank` (of stage `config.pp_info.rank`): build the engine and
    the sockets, ack, loop. Only the first pipeline stage talks to the frontend."""
    engine = Engine(config)
    peers = gather_peers(engine.world_group) if engine.world_group is not None else []
    if config.pp_info.size == 1:
        io: SchedulerIO = ZmqIO(config.tp_info, engine.cpu_group, addrs, config.dp_rank)
        scheduler = Scheduler(config, engine, io)
    else:
        io = ZmqIO(config.tp_info, engine.cpu_group, addrs, config.dp_rank) if engine.stage.is_first else DownstreamIO()
        scheduler = PipelineScheduler(config, engine, io)
    ready(f"{engine.kv_pool.allocator.num_pages} KV pages")
    try:
        with naming_dead_peers(peers):  # a killed peer is named, not the requests of the failed step
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
