"""Chapter 06 reference: one receive step of minisgl/scheduler/io.py's ZmqIO, with rank 0's messages
handed in instead of pulled from the tokenizer queue: the count over the CPU group (the engine's
`broadcast_count`, from the group's rank 0 whatever its global rank), the bytes over ZMQ."""

from __future__ import annotations

from minisgl.distributed import broadcast_count
from minisgl.scheduler.io import ZmqIO


def receive_step(io: ZmqIO, pulled: list[bytes]) -> list[bytes]:
    if io.tp_info.size == 1:
        return list(pulled)  # no peers: nothing to broadcast
    count = broadcast_count(len(pulled), io.cpu_group)  # every rank, every step, even when it is 0
    if io.tp_info.is_primary:
        for payload in pulled:
            io.publisher.put_raw(payload)
        return list(pulled)
    return [io.subscriber.get_raw() for _ in range(count)]
