"""Batch-invariant matmuls (`--deterministic`): a request's tokens do not depend on which other
requests share its batch (chapter 16, "Deterministic answers").

A CPU matmul library picks its blocking, and so the order in which it adds up each dot product,
from the shape of the call: the same row inside a batch of 1 and of 64 can come out one rounding
apart, enough in bf16 to flip a close greedy choice. In this mode the CPU kernel table (table.py)
runs every dense matmul on fixed tiles of `ROW_TILE` rows (the last one padded with zeros), so each
row always goes through a call of the same shape; attention has its own fixed-tile backend
(minisgl/attention/batch_invariant.py). The price is the padding: a decode step of one request
multiplies ROW_TILE rows.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

ROW_TILE = 16  # rows per matmul call in batch-invariant mode


def in_row_tiles(x: torch.Tensor, fn: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """fn(x) for x [rows, in], computed ROW_TILE rows at a time in calls of exactly that shape."""
    rows = x.shape[0]
    padded = -(-rows // ROW_TILE) * ROW_TILE
    if padded != rows:
        x = torch.cat([x, x.new_zeros(padded - rows, *x.shape[1:])])
    return torch.cat([fn(tile) for tile in x.split(ROW_TILE)])[:rows]
