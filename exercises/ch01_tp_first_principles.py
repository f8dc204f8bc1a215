"""Chapter 01 (TP first principles): the forward of a column- and a row-parallel linear layer.

PyTorch stores a linear weight as W [out, in] and computes y = x @ W.T + b. With tp ranks, every
rank holds a shard of W (chapter 04 shows how the loader cuts it; here it is given to you):
- column parallel splits `out`: rank r holds rows r*out/tp .. (r+1)*out/tp of W and of b, gets
  the whole input, and computes its slice of y. No communication.
- row parallel splits `in`: rank r holds columns r*in/tp .. (r+1)*in/tp of W, receives the
  matching slice of x, and computes a partial sum; one all-reduce adds the partial sums. The bias
  (whole on every rank) is added once, after the all-reduce.
These two functions are exactly what the engine's TP linear layers compute; the capstone
(chapter 15) runs a real model with yours.
"""

from __future__ import annotations

import torch


def column_parallel_forward(x: torch.Tensor, weight_shard: torch.Tensor,
                            bias_shard: torch.Tensor | None) -> torch.Tensor:
    """Task 01-tp-first-principles/column-forward: this rank's slice of a column-parallel linear.

    x:            [tokens, in], the whole input (the same on every rank)
    weight_shard: [out / tp, in], this rank's rows of W
    bias_shard:   [out / tp] (this rank's entries of b) or None
    returns       [tokens, out / tp] = x @ weight_shard.T + bias_shard: columns
                  rank*out/tp .. (rank+1)*out/tp of the full layer's output

    Contract:
    - the result has x's dtype and device; x, weight_shard and bias_shard are left unchanged;
    - no collective at all: a column-parallel layer needs nothing from the other ranks;
    - raise ValueError naming the shapes when x's last dim is not weight_shard's in, or when the
      bias does not have weight_shard's number of rows.

    May use: torch. Nothing of minisgl (the engine's layers are this task).
    """
    raise NotImplementedError("01-tp-first-principles/column-forward")


def row_parallel_forward(x_local: torch.Tensor, weight_shard: torch.Tensor,
                         bias: torch.Tensor | None) -> torch.Tensor:
    """Task 01-tp-first-principles/row-forward: a row-parallel linear, complete on every rank.

    x_local:      [tokens, in / tp], this rank's slice of the input features (what a
                  column-parallel layer before it produced)
    weight_shard: [out, in / tp], this rank's columns of W
    bias:         [out], whole on every rank, or None
    returns       [tokens, out] = x @ W.T + bias, the same on every rank

    Contract:
    - exactly one `minisgl.distributed.all_reduce` (of this rank's partial sum), and no other
      collective; the bias is added once, after it;
    - the result has x_local's dtype and device; x_local, weight_shard and bias are left unchanged;
    - raise ValueError naming the shapes when x_local's last dim is not weight_shard's in / tp, or
      when the bias does not have weight_shard's number of rows (check before any collective).

    May use: torch; minisgl.distributed.all_reduce (and get_tp_info, if you want it).
    """
    raise NotImplementedError("01-tp-first-principles/row-forward")
