"""How a scheduler rank gets its messages and sends its results (chapter 06). `SchedulerIO` is what a
scheduler asks of its IO (`LocalIO` in local_io.py and a pipeline's `StageIO` are the others). In
`ZmqIO`, rank 0 pulls from its ZMQ queue, broadcasts the *count* of new messages over the gloo CPU
group, then publishes the message *bytes* over ZMQ PUB; the other ranks take the count from the same
collective and read that many messages from their SUB queue. The collective keeps every rank in
step; ZMQ carries payloads of any size without a second collective.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Protocol

import torch.distributed as dist

from minisgl.distributed import DistributedInfo, barrier, broadcast_count
from minisgl.message import (FinishedRequests, IpcAddresses, Message, PubQueue, PullQueue, PushQueue, SchedulerStats,
                             SubQueue, TokenOutput, decode_message)
from minisgl.trace import TRACE

IDLE_POLL_MS = 50  # an idle rank 0 still broadcasts a zero count this often, so peers never time out
PEER_TIMEOUT_MS = 120_000


class SchedulerIO(Protocol):
    def receive(self, blocking: bool) -> list[Message]:
        """New messages, in the same order on every rank; waits a little when `blocking`."""
        ...

    def send(self, outputs: list[TokenOutput]) -> None:
        """Hand results to the frontend (rank 0 only; other ranks drop them)."""
        ...

    def send_stats(self, stats: SchedulerStats) -> None:
        """Hand the scheduler's numbers to the frontend, for `/metrics` (rank 0 only)."""
        ...

    def close(self) -> None: ...


class ZmqIO:
    """Rank 0 reads `addrs.scheduler`, pushes its outputs to `addrs.detokenizer` and publishes on
    `addrs.broadcast`; every other rank subscribes to `addrs.broadcast`. In data-parallel replica
    `replica`, rank 0 also tells the DP controller (`addrs.controller`) which requests finished."""

    def __init__(
        self, tp_info: DistributedInfo, cpu_group: dist.ProcessGroup | None, addrs: IpcAddresses, replica: int = 0
    ) -> None:
        self.tp_info, self.cpu_group, self.replica = tp_info, cpu_group, replica
        self.controller: PushQueue | None = None
        if tp_info.is_primary:
            self.requests = PullQueue(addrs.scheduler)
            self.outputs = PushQueue(addrs.detokenizer)
            self._queues: list[PullQueue | PushQueue | PubQueue | SubQueue] = [self.requests, self.outputs]
            if addrs.controller:
                self.controller = PushQueue(addrs.controller)
                self._queues.append(self.controller)
            if tp_info.size > 1:
                self.publisher = PubQueue(addrs.broadcast)
                self._queues.append(self.publisher)
                self.publisher.wait_for_subscribers(tp_info.size - 1, PEER_TIMEOUT_MS)
        else:
            self.subscriber = SubQueue(addrs.broadcast, PEER_TIMEOUT_MS)
            self._queues = [self.subscriber]
        if cpu_group is not None:
            barrier(cpu_group)  # every SUB is connected before the first broadcast

    def receive(self, blocking: bool) -> list[Message]:
        if self.tp_info.is_primary:
            payloads = self.requests.get_all_raw(IDLE_POLL_MS if blocking else 0)
            begin = TRACE.clock()
            if self.tp_info.size > 1:
                broadcast_count(len(payloads), self.cpu_group)
                for payload in payloads:
                    self.publisher.put_raw(payload)
        else:
            begin = TRACE.clock()  # the wait for rank 0 is part of the span
            count = broadcast_count(0, self.cpu_group)
            payloads = [self.subscriber.get_raw() for _ in range(count)]
        messages = [decode_message(p) for p in payloads]
        if messages and TRACE.enabled:  # (the idle steps' empty broadcasts are not traced)
            names = [f"{type(m).__name__} {m.uid}" if hasattr(m, "uid") else type(m).__name__ for m in messages]
            TRACE.complete("broadcast" if self.tp_info.is_primary else "receive", "message", begin, messages=names)
        return messages

    def send(self, outputs: list[TokenOutput]) -> None:
        if not self.tp_info.is_primary:
            return
        if outputs and TRACE.enabled:
            TRACE.instant("send", "message", uids=[output.uid for output in outputs])
        for output in outputs:
            self.outputs.put(output)
        finished = [output.uid for output in outputs if output.finished]
        if self.controller is not None and finished:
            self.controller.put(FinishedRequests(self.replica, finished))

    def send_stats(self, stats: SchedulerStats) -> None:
        if self.tp_info.is_primary:  # along the outputs' path: the detokenizer passes it on to the API
            self.outputs.put(replace(stats, replica=self.replica))

    def close(self) -> None:
        for queue in self._queues:
            queue.close()
