"""Tensor-parallel linear layers: every one is one matmul on a local shard (chapters 01 and 04).

For Y = X W^T with W of shape [out, in] (PyTorch's layout):
- column parallel splits `out`: rank r holds W_r = W[r*out/tp:(r+1)*out/tp] and computes its slice
  of Y with no communication (Megatron-LM's `f`: identity forward);
- row parallel splits `in`: rank r holds W[:, r*in/tp:(r+1)*in/tp], receives the matching slice of
  X, and computes a partial sum; an all-reduce adds the partial sums (Megatron-LM's `g`).
Constructors only compute local sizes from `get_tp_info()`; the loader fills the shards. The matmul
itself is the device's kernel table's (kernels.py): F.linear until a speed plug-in installs faster ones.
"""

from __future__ import annotations

import torch

from minisgl.distributed import all_reduce, get_tp_info

from .base import BaseOP
from .kernels import kernels_for


def divide(total: int, parts: int, what: str) -> int:
    """`total / parts`, or a one-line error naming the quantity that does not split evenly."""
    if total % parts != 0:
        raise ValueError(f"tp_size={parts} does not divide {what}={total}")
    return total // parts


def local_kv_heads(num_kv_heads: int, tp_size: int) -> int:
    """KV heads stored on one rank: a 1/tp share, or 1 replicated head when num_kv_heads < tp."""
    if num_kv_heads >= tp_size:
        return divide(num_kv_heads, tp_size, "num_key_value_heads")
    if tp_size % num_kv_heads != 0:
        raise ValueError(f"tp_size={tp_size} is not a multiple of num_key_value_heads={num_kv_heads}")
    return 1


def kv_head_offset(rank: int, num_kv_heads: int, tp_size: int) -> int:
    """Index of the first global KV head rank `rank` holds. With fewer KV heads than ranks, tp / num_kv_heads
    consecutive ranks replicate the head their queries attend with (2 KV heads at tp = 4: ranks 0, 1 hold 0)."""
    if num_kv_heads >= tp_size:
        return rank * (num_kv_heads // tp_size)
    return rank * num_kv_heads // tp_size


class LinearBase(BaseOP):
    """Holds a local weight [local_out, local_in] and an optional bias; forward is one matmul."""

    def __init__(self, local_in: int, local_out: int, has_bias: bool = False) -> None:
        self.weight = torch.empty(local_out, local_in)
        self.bias = torch.empty(local_out) if has_bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The column-parallel forward (a replicated layer is its tp = 1 case): no communication."""
        return kernels_for(x).linear(x, self.weight, self.bias)


class ReplicatedLinear(LinearBase):
    """The full weight on every rank (no sharding, no communication): LinearBase(input_size, output_size)."""


class ColumnParallelLinear(LinearBase):
    """Splits the output dim: [tokens, in] -> [tokens, out / tp]. No communication."""

    def __init__(self, input_size: int, output_size: int, has_bias: bool = False) -> None:
        tp = get_tp_info()
        self.local_output_size = divide(output_size, tp.size, "output_size")
        super().__init__(input_size, self.local_output_size, has_bias)


class MergedColumnParallelLinear(LinearBase):
    """Several column-parallel projections sharing one input, fused into one matmul:
    gate_proj and up_proj ([intermediate, hidden] each) become gate_up_proj; each rank's weight is
    [gate shard; up shard] = [2 * intermediate / tp, hidden], so the output splits back in two."""

    def __init__(self, input_size: int, output_sizes: list[int], has_bias: bool = False) -> None:
        tp = get_tp_info()
        self.local_output_sizes = [divide(size, tp.size, "intermediate_size") for size in output_sizes]
        super().__init__(input_size, sum(self.local_output_sizes), has_bias)


class QKVParallelLinear(LinearBase):
    """q_proj, k_proj and v_proj fused, split by attention head: rank r holds num_heads / tp query
    heads and `local_kv_heads` key/value heads, so its weight is
    [(local_q_heads + 2 * local_kv_heads) * head_dim, hidden] and its output splits into q, k, v."""

    def __init__(self, hidden_size: int, head_dim: int, num_heads: int, num_kv_heads: int,
                 has_bias: bool = False) -> None:
        tp = get_tp_info()
        self.head_dim = head_dim
        self.local_q_heads = divide(num_heads, tp.size, "num_attention_heads")
        self.local_kv_heads = local_kv_heads(num_kv_heads, tp.size)
        self.q_size = self.local_q_heads * head_dim
        self.kv_size = self.local_kv_heads * head_dim
        super().__init__(hidden_size, self.q_size + 2 * self.kv_size, has_bias)


class RowParallelLinear(LinearBase):
    """Splits the input dim: [tokens, in / tp] -> partial [tokens, out] -> all-reduce -> [tokens, out].
    The bias is added once, after the all-reduce, so the sum does not count it tp times."""

    def __init__(self, input_size: int, output_size: int, has_bias: bool = False) -> None:
        tp = get_tp_info()
        self.local_input_size = divide(input_size, tp.size, "input_size")
        super().__init__(self.local_input_size, output_size, has_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        partial = kernels_for(x).linear(x, self.weight)  # [tokens, out]: this rank's share of the sum
        output = all_reduce(partial)
        return output if self.bias is None else output + self.bias
