"""The engine's tensor-parallel steps as one replaceable set (chapter 15, the capstone). Every TP
layer's forward is one of four operations on this rank's shard (column linear, row linear with its
all-reduce, vocab-parallel embedding and LM head), and loading a fifth (shard, then merge).
`EngineConfig.tp_ops` may give an engine another implementation of all five, as the capstone does
with a learner's: the engine hands `shard_and_merge` to the loader and, once the model is built,
`plug_in` points the model's TP layers at the other four; the layers never ask whether it did.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Protocol

import torch

from minisgl.layers import BaseOP, LinearBase, ParallelLMHead, RowParallelLinear, VocabParallelEmbedding

from .config import ModelConfig


class TPOps(Protocol):
    """What a replacement provides. It must pickle: every rank process receives it with its config."""

    def column_linear(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        """x [tokens, in], this rank's weight [out / tp, in] and bias [out / tp] -> [tokens, out / tp]."""
        ...

    def row_linear(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        """x [tokens, in / tp], this rank's weight [out, in / tp], the whole bias [out] -> [tokens, out],
        summed over the ranks through minisgl.distributed.all_reduce, bias added once."""
        ...

    def vocab_embedding(self, input_ids: torch.Tensor, weight: torch.Tensor, vocab_size: int) -> torch.Tensor:
        """ids [tokens], this rank's padded rows [ceil(V / tp), hidden] -> [tokens, hidden] on every rank."""
        ...

    def lm_head(self, hidden_states: torch.Tensor, weight: torch.Tensor, vocab_size: int) -> torch.Tensor:
        """[n, hidden], this rank's padded rows [ceil(V / tp), hidden] -> logits [n, V] on every rank."""
        ...

    def shard_and_merge(self, tensors: Iterable[tuple[str, torch.Tensor]], rank: int, tp_size: int,
                        config: ModelConfig) -> Iterator[tuple[str, torch.Tensor]]:
        """(checkpoint name, full tensor), one at a time -> (engine name, this rank's tensor), streamed."""
        ...


def plug_in(model: BaseOP, ops: TPOps) -> None:
    """Make every TP layer of `model` run its forward through `ops`: each gets a `forward` of its own
    that hands `ops` the layer's input, its shard and the sizes the step needs."""
    for op in model.walk():
        if isinstance(op, RowParallelLinear):
            op.forward = lambda x, op=op: ops.row_linear(x, op.weight, op.bias)
        elif isinstance(op, LinearBase):  # column-parallel, merged, QKV and replicated layers
            op.forward = lambda x, op=op: ops.column_linear(x, op.weight, op.bias)
        elif isinstance(op, VocabParallelEmbedding):
            op.forward = lambda ids, op=op: ops.vocab_embedding(ids, op.weight, op.vocab_size)
        elif isinstance(op, ParallelLMHead):
            op.forward = lambda h, op=op: ops.lm_head(h, op.local_weight(), op.vocab_size)
