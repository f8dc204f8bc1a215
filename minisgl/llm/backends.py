"""Two ways the offline `LLM` drives schedulers: in this process (tp = 1), or as real rank
processes reached over ZMQ (tp > 1), exactly as the server does."""

from __future__ import annotations

import dataclasses

import zmq

from minisgl.engine.engine import Engine
from minisgl.message import GenerateRequest, Message, ShutdownRequest, TokenOutput, decode_message, encode_message
from minisgl.scheduler import LocalIO, Scheduler, SchedulerConfig
from minisgl.server.ranks import LaunchError, RankGroup

POLL_MS = 200


class InProcessBackend:
    """One scheduler in this process, stepped by the caller; nothing to spawn at tp = 1."""

    def __init__(self, config: SchedulerConfig) -> None:
        self.io = LocalIO()
        self.scheduler = Scheduler(config, Engine(config), self.io)

    def submit(self, messages: list[Message]) -> None:
        self.io.inbox.extend(messages)

    def collect(self) -> list[TokenOutput]:
        if not self.io.outbox:
            self.scheduler.step()
        outputs, self.io.outbox = self.io.outbox, []
        return outputs

    def close(self) -> None:
        self.scheduler.engine.shutdown()


class MultiProcessBackend:
    """tp rank processes; this process pushes requests to rank 0 and pulls its outputs."""

    def __init__(self, config: SchedulerConfig) -> None:
        self.context = zmq.Context()
        self.context.setsockopt(zmq.LINGER, 0)  # never block exit on unsent messages
        self.outputs = self.context.socket(zmq.PULL)
        port = self.outputs.bind_to_random_port("tcp://127.0.0.1")
        try:
            self.ranks = RankGroup.start(dataclasses.replace(config, outputs_addr=f"tcp://127.0.0.1:{port}"))
        except BaseException:
            self.context.destroy()
            raise
        self.requests = self.context.socket(zmq.PUSH)
        self.requests.connect(self.ranks.config.requests_addr)

    def submit(self, messages: list[Message]) -> None:
        for message in messages:
            self.requests.send(encode_message(message))

    def collect(self) -> list[TokenOutput]:
        while not self.outputs.poll(POLL_MS):
            self.ranks.check_alive()  # a dead rank is an error, never a hang
        outputs = []
        while True:
            try:
                outputs.append(decode_message(self.outputs.recv(zmq.NOBLOCK)))
            except zmq.Again:
                return outputs

    def close(self) -> None:
        try:
            self.submit([ShutdownRequest()])
            for process in self.ranks.processes:
                process.join(5.0)
        except LaunchError:
            pass
        finally:
            self.ranks.shutdown()
            self.context.destroy(linger=0)

