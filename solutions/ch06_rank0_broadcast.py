"""Chapter 06 reference: one receive step of minisgl/scheduler/io.py's ZmqIO, with rank 0's messages
handed in instead of pulled from the tokenizer socket: the count over the CPU group (from the
group's rank 0, whatever its global rank), the bytes over ZMQ."""

from __future__ import annotations

import torch
import torch.distributed as dist

from minisgl.scheduler.io import ZmqIO


def receive_step(io: ZmqIO, pulled: list[bytes]) -> list[bytes]:
    if io.tp_info.size == 1:
        return list(pulled)  # no peers: nothing to broadcast
    count = torch.tensor([len(pulled)], dtype=torch.int64)  # [1]; sent even when it is 0
    dist.broadcast(count, src=dist.get_global_rank(io.cpu_group, 0), group=io.cpu_group)
    if io.tp_info.is_primary:
        for payload in pulled:
            io.publisher.send(payload)
        return list(pulled)
    return [io.subscriber.recv() for _ in range(int(count.item()))]
