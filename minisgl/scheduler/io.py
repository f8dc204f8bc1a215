"""How a scheduler rank gets its messages and sends its results (chapter 06).

- `LocalIO`: in-process queues, for the offline `LLM` at tp = 1.
- `ZmqIO`: rank 0 pulls from the frontend's ZMQ socket, broadcasts the *count* of new messages over
  the gloo CPU group, then publishes the message *bytes* over ZMQ PUB; other ranks receive the
  count from the same collective, then read exactly that many messages from their SUB socket.
  The collective keeps every rank in step (no rank can run ahead into a step the others have not
  seen); ZMQ carries payloads of any size without a second collective.
"""

from __future__ import annotations

from collections import deque
from typing import Protocol

import torch
import torch.distributed as dist
import zmq

from minisgl.distributed import DistributedInfo
from minisgl.message import Message, TokenOutput, decode_message, encode_message

IDLE_POLL_MS = 50  # an idle rank 0 still broadcasts a zero count this often, so peers never time out
PEER_TIMEOUT_MS = 120_000


class SchedulerIO(Protocol):
    def receive(self, blocking: bool) -> list[Message]:
        """New messages, in the same order on every rank; waits a little when `blocking`."""
        ...

    def send(self, outputs: list[TokenOutput]) -> None:
        """Hand results to the frontend (rank 0 only; other ranks drop them)."""
        ...

    def close(self) -> None: ...


class LocalIO:
    def __init__(self) -> None:
        self.inbox: deque[Message] = deque()
        self.outbox: list[TokenOutput] = []

    def receive(self, blocking: bool) -> list[Message]:
        messages = list(self.inbox)
        self.inbox.clear()
        return messages

    def send(self, outputs: list[TokenOutput]) -> None:
        self.outbox.extend(outputs)

    def close(self) -> None:
        pass


class ZmqIO:
    def __init__(
        self,
        tp_info: DistributedInfo,
        cpu_group: dist.ProcessGroup | None,
        requests_addr: str,
        outputs_addr: str,
        broadcast_addr: str,
    ) -> None:
        self.tp_info = tp_info
        self.cpu_group = cpu_group
        self.context = zmq.Context()
        self.context.setsockopt(zmq.LINGER, 0)  # a dying peer must not block our exit
        if tp_info.is_primary:
            self.requests = self.context.socket(zmq.PULL)
            self.requests.bind(requests_addr)
            self.outputs = self.context.socket(zmq.PUSH)
            self.outputs.connect(outputs_addr)
            if tp_info.size > 1:
                self.publisher = self.context.socket(zmq.XPUB)
                self.publisher.setsockopt(zmq.XPUB_VERBOSE, 1)  # report every subscriber, not just the first
                self.publisher.bind(broadcast_addr)
                self._wait_for_subscribers()
        else:
            self.subscriber = self.context.socket(zmq.SUB)
            self.subscriber.setsockopt(zmq.SUBSCRIBE, b"")
            self.subscriber.setsockopt(zmq.RCVTIMEO, PEER_TIMEOUT_MS)
            self.subscriber.connect(broadcast_addr)
        if cpu_group is not None:
            dist.barrier(group=cpu_group)  # every SUB is connected before the first broadcast

    def _wait_for_subscribers(self) -> None:
        """PUB drops messages for subscribers that have not joined yet; wait until all tp-1 have."""
        self.publisher.setsockopt(zmq.RCVTIMEO, PEER_TIMEOUT_MS)
        for _ in range(self.tp_info.size - 1):
            self.publisher.recv()  # one subscription frame per SUB socket

    def receive(self, blocking: bool) -> list[Message]:
        if self.tp_info.is_primary:
            payloads = self._pull_requests(blocking)
            if self.tp_info.size > 1:
                self._broadcast_count(len(payloads))
                for payload in payloads:
                    self.publisher.send(payload)
        else:
            count = self._broadcast_count(0)
            payloads = [self.subscriber.recv() for _ in range(count)]
        return [decode_message(p) for p in payloads]

    def _pull_requests(self, blocking: bool) -> list[bytes]:
        if blocking:
            self.requests.poll(IDLE_POLL_MS)
        payloads = []
        while True:
            try:
                payloads.append(self.requests.recv(zmq.NOBLOCK))
            except zmq.Again:
                return payloads

    def _broadcast_count(self, count: int) -> int:
        """Rank 0 sends `count`; every other rank returns what rank 0 sent."""
        tensor = torch.tensor([count], dtype=torch.int64)
        dist.broadcast(tensor, src=0, group=self.cpu_group)
        return int(tensor.item())

    def send(self, outputs: list[TokenOutput]) -> None:
        if self.tp_info.is_primary:
            for output in outputs:
                self.outputs.send(encode_message(output))

    def close(self) -> None:
        self.context.destroy(linger=0)
