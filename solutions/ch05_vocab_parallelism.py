"""Chapter 05 reference: the engine's VocabParallelEmbedding and ParallelLMHead (minisgl.layers),
built on the meta device and given this rank's (padded) shard, as the engine's loader does."""

from __future__ import annotations

import torch

from minisgl.layers import ParallelLMHead, VocabParallelEmbedding


def vocab_parallel_embedding(input_ids: torch.Tensor, weight_shard: torch.Tensor, vocab_size: int) -> torch.Tensor:
    with torch.device("meta"):
        embedding = VocabParallelEmbedding(vocab_size, weight_shard.shape[1])
    embedding.weight = weight_shard  # [shard_size, hidden]
    return embedding.forward(input_ids)  # [tokens, hidden], all-reduced


def parallel_lm_head(hidden_states: torch.Tensor, weight_shard: torch.Tensor, vocab_size: int) -> torch.Tensor:
    with torch.device("meta"):
        lm_head = ParallelLMHead(vocab_size, weight_shard.shape[1])
    lm_head.weight = weight_shard  # [shard_size, hidden]
    return lm_head.forward(hidden_states)  # [n, vocab_size], gathered and trimmed
