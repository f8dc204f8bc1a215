"""Two ways the offline `LLM` drives schedulers: in this process (tp = 1), or as real rank
processes reached over ZMQ (tp > 1, or data-parallel replicas behind their controller), started
and stopped exactly as the server does (chapters 00 and 12)."""

from __future__ import annotations

import gc

import torch

from minisgl.config import SchedulerConfig
from minisgl.engine.engine import Engine
from minisgl.message import IpcAddresses, Message, PullQueue, PushQueue, SchedulerStats, TokenOutput
from minisgl.process import ChildGroup
from minisgl.scheduler import LocalIO, Scheduler
from minisgl.scheduler.data_parallel import spawn_schedulers
from minisgl.scheduler.process import shut_down_ranks

POLL_MS = 200
START_TIMEOUT_S = 300.0
STOP_TIMEOUT_S = 5.0


class InProcessBackend:
    """One scheduler in this process, stepped by the caller; nothing to spawn at tp = 1. The one
    place that drives a `Scheduler` in-process: tests and benchmarks reach it through `LLM.backend`."""

    def __init__(self, config: SchedulerConfig) -> None:
        self.io = LocalIO()
        self.engine = Engine(config)
        self.scheduler = Scheduler(self.engine.config, self.engine, self.io)

    def submit(self, messages: list[Message]) -> None:
        self.io.inbox.extend(messages)

    def collect(self) -> list[TokenOutput]:
        if not self.io.outbox:
            self.scheduler.step()
        outputs, self.io.outbox = self.io.outbox, []
        return outputs

    def stats(self) -> SchedulerStats:
        return self.scheduler.stats()

    def close(self) -> None:
        self.engine.shutdown()
        on_cuda = self.engine.device.type == "cuda"
        del self.scheduler, self.engine  # the last references to the weights, the KV pool and the graphs
        if on_cuda:
            # torch's allocator keeps freed blocks for itself, and the next engine in this process sizes
            # its pool from what the driver calls free: hand them back (the model's modules form cycles)
            gc.collect()
            torch.cuda.empty_cache()


class MultiProcessBackend:
    """tp rank processes (of each replica, behind the DP controller); this process pushes requests to
    rank 0 (or the controller) and pulls the outputs (there is no detokenizer offline: this process
    reads rank 0's `TokenOutput`s at the detokenizer's address)."""

    def __init__(self, config: SchedulerConfig) -> None:
        self.group = ChildGroup(config.trace_dir)
        self.addrs = IpcAddresses.in_dir(self.group.ipc_dir)
        self.outputs = PullQueue(self.addrs.detokenizer)
        self.requests = PushQueue(self.addrs.scheduler)
        self.last_stats: SchedulerStats | None = None
        try:
            self.ranks = spawn_schedulers(self.group, config, self.addrs)
            self.group.wait_ready(START_TIMEOUT_S)
        except BaseException:
            self.group.stop()  # (wait_ready stops a group that fails; a second stop does nothing)
            self._close_queues()
            raise

    def submit(self, messages: list[Message]) -> None:
        for message in messages:
            self.requests.put(message)

    def collect(self) -> list[TokenOutput]:
        while True:
            outputs = []
            for message in self.outputs.get_all(POLL_MS):
                if isinstance(message, TokenOutput):
                    outputs.append(message)
                elif isinstance(message, SchedulerStats):  # rank 0 sends them this way too (for /metrics)
                    self.last_stats = message
            if outputs:
                return outputs
            self.group.check_alive()  # a dead rank is an error, never a hang

    def stats(self) -> SchedulerStats:
        if self.last_stats is None:
            raise RuntimeError("rank 0 has sent no stats yet; collect outputs for a second first")
        return self.last_stats

    def close(self) -> None:
        if all(p.is_alive() for p in self.ranks):
            shut_down_ranks(self.ranks, self.addrs, STOP_TIMEOUT_S)
        self.group.stop()
        self._close_queues()

    def _close_queues(self) -> None:
        self.outputs.close()
        self.requests.close()
