"""Chapter 01 reference: the forward of a column- and a row-parallel linear on this rank's shard,
as minisgl/layers/linear.py computes them."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from minisgl.distributed import all_reduce


def _check_shapes(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, what: str) -> None:
    if x.shape[-1] != weight.shape[1]:
        raise ValueError(f"{what}: input has {x.shape[-1]} features, the weight shard {tuple(weight.shape)} takes "
                         f"{weight.shape[1]}")
    if bias is not None and bias.shape != (weight.shape[0],):
        raise ValueError(f"{what}: bias {tuple(bias.shape)} does not match the weight shard's {weight.shape[0]} rows")


def column_parallel_forward(x: torch.Tensor, weight_shard: torch.Tensor,
                            bias_shard: torch.Tensor | None) -> torch.Tensor:
    _check_shapes(x, weight_shard, bias_shard, "column_parallel_forward")
    return F.linear(x, weight_shard, bias_shard)  # [tokens, out / tp]: whole dot products, no communication


def row_parallel_forward(x_local: torch.Tensor, weight_shard: torch.Tensor,
                         bias: torch.Tensor | None) -> torch.Tensor:
    _check_shapes(x_local, weight_shard, bias, "row_parallel_forward")
    partial = F.linear(x_local, weight_shard)  # [tokens, out]: this rank's share of the sum
    output = all_reduce(partial)
    return output if bias is None else output + bias  # once, after the sum
