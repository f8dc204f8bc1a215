"""Code that runs inside each rank for chapter 01: minisgl's column- and row-parallel linear layers
on real gloo ranks, fed the same shards the one-process simulation used."""

from __future__ import annotations

import torch

from minisgl.layers import ColumnParallelLinear, RowParallelLinear


def column_parallel(rank: int, world_size: int, x: torch.Tensor, w: torch.Tensor) -> dict:
    """x [tokens, in] is whole on every rank; w [out, in] is the full weight, cut here by rows."""
    layer = ColumnParallelLinear(w.shape[1], w.shape[0])  # reads (rank, size) from get_tp_info()
    layer.set_weight("weight", w.chunk(world_size, dim=0)[rank].clone())
    return {"weight": tuple(layer.weight.shape), "output": layer.forward(x)}  # [tokens, out / tp]


def row_parallel(rank: int, world_size: int, x: torch.Tensor, w: torch.Tensor) -> dict:
    """Rank r gets x's r-th column slice and w's r-th column slice; the layer all-reduces."""
    layer = RowParallelLinear(w.shape[1], w.shape[0])
    layer.set_weight("weight", w.chunk(world_size, dim=1)[rank].clone())
    x_local = x.chunk(world_size, dim=-1)[rank]  # [tokens, in / tp]
    return {"weight": tuple(layer.weight.shape), "output": layer.forward(x_local)}  # [tokens, out]
