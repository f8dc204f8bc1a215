"""Chapter 01 reference: the engine's ColumnParallelLinear / RowParallelLinear, fed this rank's shard.

The layers are built on the meta device, as the engine builds its model, and get their shard the way
the loader gives it (minisgl.models.weight: column = split dim 0, row = split dim 1).
"""

from __future__ import annotations

import torch

from minisgl.distributed import get_tp_info
from minisgl.layers import ColumnParallelLinear, RowParallelLinear


def column_parallel_forward(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    tp = get_tp_info()
    out_features, in_features = weight.shape
    with torch.device("meta"):
        layer = ColumnParallelLinear(in_features, out_features, has_bias=bias is not None)
    layer.weight = weight.chunk(tp.size, dim=0)[tp.rank]  # [out / tp, in]
    if bias is not None:
        layer.bias = bias.chunk(tp.size, dim=0)[tp.rank]  # [out / tp]
    return layer.forward(x)  # [tokens, out / tp]


def row_parallel_forward(x_local: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    tp = get_tp_info()
    out_features, in_features = weight.shape
    with torch.device("meta"):
        layer = RowParallelLinear(in_features, out_features, has_bias=bias is not None)
    layer.weight = weight.chunk(tp.size, dim=1)[tp.rank]  # [out, in / tp]
    layer.bias = bias  # [out], whole on every rank: added once, after the all-reduce
    return layer.forward(x_local)  # [tokens, out], all-reduced
