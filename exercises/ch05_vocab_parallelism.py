"""Chapter 05 (vocab parallelism): the embedding table and the LM head split by token id.

The vocabulary of V ids is cut into tp contiguous shards of shard_size = ceil(V / tp) rows; rank r
owns ids [r * shard_size, min((r + 1) * shard_size, V)). When tp does not divide V, the last
shard is padded with zero rows so that every rank's weight has the same shape [shard_size, hidden]
(minisgl.models.weight pads it while loading). Read the rank with `minisgl.distributed.get_tp_info()`
and communicate only through `minisgl.distributed` (all_reduce, all_gather).
"""

from __future__ import annotations

import torch


def vocab_parallel_embedding(input_ids: torch.Tensor, weight_shard: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Task 05-vocab-parallelism/vocab-embedding: full embeddings from a vocab-sharded table.

    input_ids:    [tokens] int64, any ids in [0, vocab_size), the same on every rank
    weight_shard: [shard_size, hidden], this rank's rows (padding rows are zero)
    returns       [tokens, hidden], the same on every rank: row i is the embedding of input_ids[i]

    Look up only the ids of your shard (their local row is id - vocab_start), write zeros for all
    other ids, and add the ranks' results with one all-reduce.
    """
    raise NotImplementedError("05-vocab-parallelism/vocab-embedding")


def parallel_lm_head(hidden_states: torch.Tensor, weight_shard: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Task 05-vocab-parallelism/lm-head: logits over the full vocabulary from a vocab-sharded weight.

    hidden_states: [n, hidden], the positions that will be sampled, the same on every rank
    weight_shard:  [shard_size, hidden], this rank's rows of the LM head (padding rows are zero)
    returns        [n, vocab_size] logits = hidden_states @ W.T, the same on every rank

    Each rank computes its [n, shard_size] logits; one all_gather stacks the ranks' blocks along
    dim 0 in rank order ([tp * n, shard_size]); put the shards side by side per position and drop
    the padding columns.
    """
    raise NotImplementedError("05-vocab-parallelism/lm-head")
