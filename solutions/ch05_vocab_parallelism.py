"""Chapter 05 reference: the masked embedding lookup plus all-reduce, and the LM head's all-gather
plus trim, as minisgl/layers/embedding.py computes them."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from minisgl.distributed import all_gather, all_reduce, get_tp_info


def _shard_size(weight_shard: torch.Tensor, vocab_size: int, what: str) -> int:
    tp = get_tp_info().size
    shard_size = -(-vocab_size // tp)
    if weight_shard.shape[0] != shard_size:
        raise ValueError(f"{what}: a shard of V={vocab_size} at tp={tp} has {shard_size} rows, "
                         f"got {weight_shard.shape[0]}")
    return shard_size


def vocab_parallel_embedding(input_ids: torch.Tensor, weight_shard: torch.Tensor, vocab_size: int) -> torch.Tensor:
    shard_size = _shard_size(weight_shard, vocab_size, "vocab_parallel_embedding")
    start = get_tp_info().rank * shard_size
    mine = (input_ids >= start) & (input_ids < start + shard_size)  # [tokens]
    local_ids = torch.where(mine, input_ids - start, 0)  # foreign ids read row 0, then get zeroed
    rows = F.embedding(local_ids, weight_shard) * mine.unsqueeze(-1).to(weight_shard.dtype)  # [tokens, hidden]
    return all_reduce(rows)  # exactly one rank contributed each row


def parallel_lm_head(hidden_states: torch.Tensor, weight_shard: torch.Tensor, vocab_size: int) -> torch.Tensor:
    shard_size = _shard_size(weight_shard, vocab_size, "parallel_lm_head")
    n, tp = hidden_states.shape[0], get_tp_info().size
    local = F.linear(hidden_states, weight_shard)  # [n, shard_size]
    gathered = all_gather(local)  # [tp * n, shard_size], rank-major
    logits = gathered.view(tp, n, shard_size).transpose(0, 1).reshape(n, tp * shard_size)  # shards side by side
    return logits[:, :vocab_size]  # drop the padding columns
