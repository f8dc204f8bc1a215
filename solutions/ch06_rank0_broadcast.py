"""Chapter 06 reference: one receive step of the engine's ZmqIO (minisgl/scheduler/io.py), with
rank 0's messages handed in instead of pulled from the tokenizer socket; the count travels through
the engine's own gloo broadcast."""

from __future__ import annotations

from minisgl.scheduler.io import ZmqIO


def receive_step(io: ZmqIO, pulled: list[bytes]) -> list[bytes]:
    count = io._broadcast_count(len(pulled))  # gloo broadcast from rank 0: every rank, every step
    if io.tp_info.is_primary:
        for payload in pulled:
            io.publisher.send(payload)
        return list(pulled)
    return [io.subscriber.recv() for _ in range(count)]
