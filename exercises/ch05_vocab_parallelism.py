"""Chapter 05 (vocab parallelism): the embedding table and the LM head split by token id.

The vocabulary of V ids is cut into tp contiguous shards of shard_size = ceil(V / tp) rows; rank r
owns ids [r * shard_size, min((r + 1) * shard_size, V)). When tp does not divide V, the last
shard is padded with zero rows so that every rank's weight has the same shape [shard_size, hidden]
(your shard_tensor of chapter 04 pads it while loading). Both functions run in the capstone
(chapter 15) as the real model's embedding and LM head.

May use, in both tasks: torch; minisgl.distributed.get_tp_info, all_reduce and all_gather.
Nothing else of minisgl (its VocabParallelEmbedding and ParallelLMHead are these tasks).
"""

from __future__ import annotations

import torch


def vocab_parallel_embedding(input_ids: torch.Tensor, weight_shard: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Task 05-vocab-parallelism/vocab-embedding: full embeddings from a vocab-sharded table.

    input_ids:    [tokens] int64, any ids in [0, vocab_size), the same on every rank
    weight_shard: [shard_size, hidden], this rank's rows (padding rows are zero)
    returns       [tokens, hidden], the same on every rank: row i is the embedding of input_ids[i]

    Look up only the ids of your shard (their local row is id - vocab_start), write zeros for all
    other ids, and add the ranks' results.

    Contract:
    - exactly one `minisgl.distributed.all_reduce` and no other collective (at tp = 1 too);
    - the result has weight_shard's dtype and device; input_ids and weight_shard are left unchanged;
    - raise ValueError when weight_shard does not have ceil(vocab_size / tp) rows.
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

    Contract:
    - exactly one `minisgl.distributed.all_gather` and no other collective (at tp = 1 too);
    - the result has hidden_states' dtype and device; the inputs are left unchanged;
    - raise ValueError when weight_shard does not have ceil(vocab_size / tp) rows.
    """
    raise NotImplementedError("05-vocab-parallelism/lm-head")
