"""Vocabulary-parallel embedding and LM head (chapter 05). The vocabulary V is cut into tp contiguous
shards of `shard_size = ceil(V / tp)` rows; the last is padded with zero rows when V % tp != 0. The
embedding looks up only ids in its shard, writes zeros elsewhere, and an all-reduce assembles full
vectors. The LM head computes logits for its shard, all-gathers them, and trims the padding.
"""

from __future__ import annotations

import torch

from minisgl.distributed import all_gather, all_reduce, get_tp_info

from .base import BaseOP
from .kernels import kernels_for


def vocab_shard_size(vocab_size: int, tp_size: int) -> int:
    """Rows per rank: ceil(V / tp). tp * shard_size - V rows of padding sit on the last rank(s)."""
    return -(-vocab_size // tp_size)


class VocabParallelEmbedding(BaseOP):
    """Embedding table split by token id: rank r owns ids [vocab_start, vocab_end)."""

    def __init__(self, vocab_size: int, hidden_size: int) -> None:
        tp = get_tp_info()
        self.vocab_size = vocab_size
        self.shard_size = vocab_shard_size(vocab_size, tp.size)
        self.vocab_start = tp.rank * self.shard_size
        self.vocab_end = min(self.vocab_start + self.shard_size, vocab_size)
        self.weight = torch.empty(self.shard_size, hidden_size)  # [shard_size, hidden]

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        kernels = kernels_for(input_ids)  # the lookup's kernel: F.embedding unless a device plug-in is in
        if get_tp_info().size == 1:  # the whole table is here; the seam's all-reduce is the identity
            return all_reduce(kernels.embedding(input_ids, self.weight))
        in_shard = (input_ids >= self.vocab_start) & (input_ids < self.vocab_end)  # [tokens]
        local_ids = torch.where(in_shard, input_ids - self.vocab_start, 0)
        embeddings = kernels.embedding(local_ids, self.weight)  # [tokens, hidden]
        embeddings = embeddings * in_shard.unsqueeze(-1).to(embeddings.dtype)  # zero foreign ids
        return all_reduce(embeddings)


class ParallelLMHead(BaseOP):
    """Logits over the full vocabulary from a vocab-sharded weight; with tied embeddings, the
    embedding's shard (same rows, same padding)."""

    def __init__(
        self, vocab_size: int, hidden_size: int, tied_embedding: VocabParallelEmbedding | None = None
    ) -> None:
        tp = get_tp_info()
        self.vocab_size = vocab_size
        self.shard_size = vocab_shard_size(vocab_size, tp.size)
        self._tied_embedding = tied_embedding
        if tied_embedding is None:
            self.weight = torch.empty(self.shard_size, hidden_size)  # [shard_size, hidden]

    def local_weight(self) -> torch.Tensor:
        if self._tied_embedding is not None:
            return self._tied_embedding.weight
        return self.weight

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """[n, hidden] -> [n, vocab_size]: only the positions that will be sampled come in."""
        local_logits = kernels_for(hidden_states).linear(hidden_states, self.local_weight())  # [n, shard_size]
        tp_size = get_tp_info().size
        gathered = all_gather(local_logits)  # [tp * n, shard_size], rank-major
        n = hidden_states.shape[0]
        # [tp, n, shard] -> [n, tp, shard] -> [n, tp * shard]: shards side by side in rank order
        logits = gathered.view(tp_size, n, self.shard_size).transpose(0, 1).reshape(n, -1)
        return logits[:, : self.vocab_size]  # drop the padding rows' logits
