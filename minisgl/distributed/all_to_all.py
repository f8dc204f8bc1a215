"""All-to-all: every rank sends a different block of rows to every other rank (chapter 14).

Expert parallelism moves tokens with it: each rank sends every routed token to the rank that holds
its expert (dispatch) and gets the expert outputs back the same way (combine). The blocks differ in
size from step to step, so a dispatch first swaps the counts (a small all-to-all of one int per
(rank, expert)), then the rows. Both are counted by the communication counter under "all_to_all",
with the bytes this rank hands in.

It runs through torch.distributed on the group of the seam's torch plugin (gloo on CPU; NCCL on
GPUs: PyNCCL has no all-to-all here, so a GPU run with experts across ranks uses torch's NCCL).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from .counter import COMM_COUNTER
from .impl import DistributedCommunicator, TorchDistributedImpl, get_tp_info


def all_to_all_counts(counts: torch.Tensor) -> torch.Tensor:
    """counts [tp * n]: block r (n ints) is what this rank sends to rank r -> [tp * n], block r what
    rank r sends to this rank (identity at tp = 1)."""
    return _exchange(counts, None, None)


def all_to_all_rows(x: torch.Tensor, send_counts: list[int], recv_counts: list[int]) -> torch.Tensor:
    """x [sum(send_counts), ...]: the first send_counts[0] rows go to rank 0, the next send_counts[1]
    to rank 1, ... -> [sum(recv_counts), ...]: rank 0's rows for this rank first, then rank 1's, ..."""
    return _exchange(x, send_counts, recv_counts)


def _exchange(x: torch.Tensor, send_counts: list[int] | None, recv_counts: list[int] | None) -> torch.Tensor:
    tp = get_tp_info()
    if tp.size == 1:
        return x
    group = _torch_group()
    rows = sum(recv_counts) if recv_counts is not None else x.shape[0]
    out = x.new_empty((rows, *x.shape[1:]))
    x = x.contiguous()

    def exchange(x: torch.Tensor) -> torch.Tensor:
        dist.all_to_all_single(out, x, output_split_sizes=recv_counts, input_split_sizes=send_counts, group=group)
        return out

    if COMM_COUNTER.enabled:
        return COMM_COUNTER.run("all_to_all", x, exchange)
    return exchange(x)


def _torch_group() -> dist.ProcessGroup | None:
    for plugin in reversed(DistributedCommunicator.plugins):
        if isinstance(plugin, TorchDistributedImpl):
            return plugin.group
    raise RuntimeError(
        f"minisgl.distributed all-to-all at tp size {get_tp_info().size} needs a torch.distributed group, and this "
        "process has joined none: run it on real ranks (set_tp_info alone does not connect them)"
    )
