"""Grades chapter 05 on real ranks with a vocabulary of 11 ids, which no tp > 1 divides: every id
(the shard boundaries included) goes through the embedding, and the LM head must trim its padding."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from exercises.grader import adapters
from exercises.grader.checks import assert_counts, assert_ranks_close, values
from exercises.grader.ranks import RankContext

VOCAB, HIDDEN, POSITIONS = 11, 6, 3


def _padded_shard(table: torch.Tensor, rank: int, tp: int) -> torch.Tensor:
    """Rows [rank * s, (rank + 1) * s) of the table, s = ceil(V / tp), zero-padded past V."""
    shard_size = -(-VOCAB // tp)
    padded = torch.zeros(shard_size * tp, table.shape[1])
    padded[:VOCAB] = table
    return padded[rank * shard_size:(rank + 1) * shard_size].clone()


def _ids(tp: int) -> torch.Tensor:
    """Every id once in a shuffled order, then each shard's first and last id again."""
    shard_size = -(-VOCAB // tp)
    edges = [i for r in range(tp) for i in (r * shard_size - 1, r * shard_size, (r + 1) * shard_size - 1)]
    edges = [i for i in edges if 0 <= i < VOCAB]
    return torch.cat([torch.randperm(VOCAB, generator=torch.Generator().manual_seed(tp)), torch.tensor(edges)])


def _embedding_job(ctx: RankContext, impl: str, ids: torch.Tensor, table: torch.Tensor):
    shard = _padded_shard(table, ctx.rank, ctx.world_size).to(ctx.device)
    return adapters.vocab_parallel_embedding(impl, ids.to(ctx.device), shard, VOCAB).cpu()


@pytest.mark.task("05-vocab-parallelism/vocab-embedding")
@pytest.mark.timeout(180)
def test_vocab_embedding(impl, run_ranks, world_size):
    table = torch.randn(VOCAB, HIDDEN, generator=torch.Generator().manual_seed(5))
    ids = _ids(world_size)
    results = run_ranks(_embedding_job, impl=impl, ids=ids, table=table)
    # Exact in principle (one rank adds its row, the others add zeros); tolerance only for safety.
    assert_ranks_close(f"vocab_parallel_embedding (V={VOCAB}, tp={world_size}, row i = table[ids[i]], ids {ids.tolist()})",
                       values(results), F.embedding(ids, table))
    assert_counts("vocab_parallel_embedding", results, all_reduce=1)


def _lm_head_job(ctx: RankContext, impl: str, hidden: torch.Tensor, table: torch.Tensor):
    shard = _padded_shard(table, ctx.rank, ctx.world_size).to(ctx.device)
    return adapters.parallel_lm_head(impl, hidden.to(ctx.device), shard, VOCAB).cpu()


@pytest.mark.task("05-vocab-parallelism/lm-head")
@pytest.mark.timeout(180)
def test_lm_head(impl, run_ranks, world_size):
    generator = torch.Generator().manual_seed(50 + world_size)
    table, hidden = torch.randn(VOCAB, HIDDEN, generator=generator), torch.randn(POSITIONS, HIDDEN, generator=generator)
    results = run_ranks(_lm_head_job, impl=impl, hidden=hidden, table=table)
    # Each rank's matmul is smaller than the full one: its float rounding may differ slightly.
    assert_ranks_close(f"parallel_lm_head (V={VOCAB}, tp={world_size}, logits = hidden @ W.T)",
                       values(results), F.linear(hidden, table))
    assert_counts("parallel_lm_head", results, all_gather=1)
