"""Chapter 06 reference: one receive step of the engine's ZmqIO (minisgl/scheduler/io.py), with
rank 0's messages handed in instead of pulled from the tokenizer queue; the count travels through
the engine's own gloo broadcast (`minisgl.distributed.broadcast_count`)."""

from __future__ import annotations

from minisgl.distributed import broadcast_count
from minisgl.scheduler.io import ZmqIO


def receive_step(io: ZmqIO, pulled: list[bytes]) -> list[bytes]:
    count = broadcast_count(len(pulled), io.cpu_group)  # gloo, from rank 0: every rank, every step
    if io.tp_info.is_primary:
        for payload in pulled:
            io.publisher.put_raw(payload)
        return list(pulled)
    return [io.subscriber.get_raw() for _ in range(count)]
