"""Chapter 01 (TP first principles): column- and row-parallel linear layers.

PyTorch stores a linear weight as W [out, in] and computes y = x @ W.T + b. With tp ranks:
- column parallel splits `out`: rank r keeps rows r*out/tp .. (r+1)*out/tp of W and of b, and
  computes its slice of y. No communication.
- row parallel splits `in`: rank r keeps columns r*in/tp .. (r+1)*in/tp of W, receives the
  matching slice of x, and computes a partial sum; one all-reduce adds the partial sums. The bias
  is added once, after the all-reduce.
Read this rank's position with `minisgl.distributed.get_tp_info()` (`.rank`, `.size`) and send
every collective through `minisgl.distributed` (the grader counts them).
"""

from __future__ import annotations

import torch


def column_parallel_forward(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """Task 01-tp-first-principles/column-forward: this rank's slice of a column-parallel linear.

    x:      [tokens, in], the full input (the same on every rank)
    weight: [out, in], the full checkpoint weight; keep only this rank's rows
    bias:   [out] or None; keep only this rank's entries
    returns [tokens, out / tp]: columns rank*out/tp .. (rank+1)*out/tp of x @ weight.T + bias
    """
    raise NotImplementedError("01-tp-first-principles/column-forward")


def row_parallel_forward(x_local: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """Task 01-tp-first-principles/row-forward: a row-parallel linear, complete on every rank.

    x_local: [tokens, in / tp], this rank's slice of the input features (what a column-parallel
             layer before it produced)
    weight:  [out, in], the full checkpoint weight; keep only this rank's columns
    bias:    [out] or None, added exactly once to the sum
    returns  [tokens, out] = x @ weight.T + bias, the same on every rank (one all-reduce)
    """
    raise NotImplementedError("01-tp-first-principles/row-forward")
