"""Scheduler rank processes (chapter 02): start one per TP rank in a `ChildGroup` (this node's share
of them across machines, chapter 12; every stage's with pipeline parallelism, chapter 13), the body
each runs, and how a launcher stops them. The offline `LLM` (tp > 1) and the server both use it,
with a config `minisgl.config.resolve_config` checked before any rank starts."""

from __future__ import annotations

import dataclasses
import time
from multiprocessing.process import BaseProcess

from minisgl.config import SchedulerConfig
from minisgl.distributed import DistributedInfo
from minisgl.distributed.peers import gather_peers, naming_dead_peers
from minisgl.distributed.rendezvous import file_init_method
from minisgl.message import IpcAddresses, PushQueue, ShutdownRequest
from minisgl.process import ChildGroup, Ready

from .io import SchedulerIO, ZmqIO
from .pipeline import PipelineScheduler, StageIO
from .scheduler import Scheduler


def spawn_ranks(
    group: ChildGroup, config: SchedulerConfig, addrs: IpcAddresses, node_rank: int = 0
) -> list[BaseProcess]:
    """Start the ranks of one TP group that live on node `node_rank` as children of `group`, without
    waiting for their acks (`group.wait_ready` does, together with any other children): all of them
    on one machine, `node_ranks` across machines (chapter 12); with pipeline parallelism, the TP
    group of every stage (chapter 13). On one machine the ranks meet on a store file in the run's ipc
    folder; across machines at the `dist_init_addr` every node was given; a rank alone meets no one."""
    tp_size, pp_size = config.tp_info.size, config.pp_info.size
    replica = f"DP{config.dp_rank}-" if config.dp_size > 1 else ""
    if config.nnodes == 1 and config.world_size > 1:  # a file (each replica its own): nothing listens on a port
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
    from minisgl.engine.engine import Engine  # in the rank's process: a launcher never loads the engine

    engine = Engine(config)
    peers = gather_peers(engine.groups.world) if engine.groups.world is not None else []
    io: SchedulerIO
    if config.pp_info.size == 1:
        io = ZmqIO(config.tp_info, engine.groups.cpu, addrs, config.dp_rank)
        scheduler = Scheduler(engine.config, engine, io)
    else:
        frontend = ZmqIO(config.tp_info, engine.groups.cpu, addrs, config.dp_rank) if engine.stage.is_first else None
        io = StageIO(engine.stage, frontend)
        scheduler = PipelineScheduler(engine.config, engine, io)
    ready(f"{engine.kv_pool.allocator.num_pages} KV pages, {describe_precision(engine.config)}")
    try:
        with naming_dead_peers(peers):  # a killed peer is named, not the requests of the failed step
            scheduler.run_forever()
    finally:
        io.close()
        engine.shutdown()


def describe_precision(config: SchedulerConfig) -> str:
    """What dtype "auto" became on this rank: "float32", "float32, bfloat16 matmuls, gguf up to 4 rows"."""
    parts = [config.dtype]
    if config.matmul_dtype != config.dtype:
        parts.append(f"{config.matmul_dtype} matmuls")
    if config.kv_cache_dtype != config.dtype:
        parts.append(f"{config.kv_cache_dtype} KV cache")
    if config.quantization == "gguf":
        rows = config.max_quantized_rows
        parts.append("gguf" + (f" up to {rows} rows" if rows is not None else ""))
    return ", ".join(parts)


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
