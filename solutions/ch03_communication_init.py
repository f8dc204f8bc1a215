"""Chapter 03 reference: the unique-id broadcast that PyNCCLCommunicator.__init__ performs
(minisgl/distributed/pynccl.py), as a function of its own so it runs without NCCL."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist

UNIQUE_ID_BYTES = 128


def broadcast_unique_id(create_id: Callable[[], bytes], cpu_group: dist.ProcessGroup) -> bytes:
    if dist.get_rank(cpu_group) == 0:
        unique_id = create_id()
    else:
        unique_id = bytes(UNIQUE_ID_BYTES)  # overwritten by the broadcast
    id_bytes = torch.tensor(bytearray(unique_id), dtype=torch.uint8)  # [128], on the CPU for gloo
    dist.broadcast(id_bytes, src=dist.get_global_rank(cpu_group, 0), group=cpu_group)
    return bytes(id_bytes.tolist())
