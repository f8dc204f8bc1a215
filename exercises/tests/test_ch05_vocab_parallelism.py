"""Grades chapter 05 on real ranks with a vocabulary of 11 ids, which no tp > 1 divides: every id
(the shard boundaries included) goes through the embedding, and the LM head must trim its padding.
fp32 and bf16, tp = 1 and the world size's ranks; inputs must come back untouched."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from exercises.grader import adapters
from exercises.grader.checks import (
    DTYPES,
    SEAM_ALL_GATHER,
    SEAM_ALL_REDUCE,
    assert_collectives,
    assert_ranks_close,
    assert_unchanged,
    assert_value_error,
    changed,
    tolerance,
)

VOCAB, HIDDEN = 11, 6
CASES = [(dtype, tp) for dtype in DTYPES for tp in ("world", "tp1")]


def _padded_shard(table: torch.Tensor, rank: int, tp: int) -> torch.Tensor:
    """Rows [rank * s, (rank + 1) * s) of the table, s = ceil(V / tp), zero-padded past V."""
    shard_size = -(-VOCAB // tp)
    padded = torch.zeros(shard_size * tp, table.shape[1], dtype=table.dtype)
    padded[:VOCAB] = table
    return padded[rank * shard_size:(rank + 1) * shard_size].clone()


def _ids(tp: int) -> torch.Tensor:
    """Every id once in a shuffled order, then each shard's first and last id again."""
    shard_size = -(-VOCAB // tp)
    edges = [i for r in range(tp) for i in (r * shard_size - 1, r * shard_size, (r + 1) * shard_size - 1)]
    edges = [i for i in edges if 0 <= i < VOCAB]
    return torch.cat([torch.randperm(VOCAB, generator=torch.Generator().manual_seed(tp)), torch.tensor(edges)])


def _ranks(world_size: int, tp_size: int) -> list[int]:
    """Each rank's rank in the tp view: itself, or 0 at tp = 1 (every rank on its own)."""
    return [rank if tp_size > 1 else 0 for rank in range(world_size)]


@pytest.mark.task("05-vocab-parallelism/vocab-embedding")
@pytest.mark.timeout(180)
@pytest.mark.parametrize("dtype,tp", CASES, ids=[f"{d}-{t}" for d, t in CASES])
def test_vocab_embedding(run_ranks, world_size, dtype, tp):
    tp_size = world_size if tp == "world" else 1
    table = torch.randn(VOCAB, HIDDEN, generator=torch.Generator().manual_seed(5)).to(DTYPES[dtype])
    ids = _ids(tp_size)
    results = run_ranks([adapters.vocab_parallel_embedding(ids, _padded_shard(table, r, tp_size), VOCAB,
                                                           tp=(r, tp_size)) for r in _ranks(world_size, tp_size)])
    what = f"vocab_parallel_embedding ({dtype}, V={VOCAB}, tp={tp_size}, row i = table[ids[i]], ids {ids.tolist()})"
    # exact: one rank adds its row, the others add zeros
    assert_ranks_close(what, [r.value for r in results], F.embedding(ids, table).double(), DTYPES[dtype], 0.0)
    assert_unchanged(what, [changed(r, ("input_ids", "weight_shard")) for r in results])
    assert_collectives(what, results, {SEAM_ALL_REDUCE: 1})


@pytest.mark.task("05-vocab-parallelism/lm-head")
@pytest.mark.timeout(180)
@pytest.mark.parametrize("positions", [1, 3])
@pytest.mark.parametrize("dtype,tp", CASES, ids=[f"{d}-{t}" for d, t in CASES])
def test_lm_head(run_ranks, world_size, dtype, tp, positions):
    tp_size = world_size if tp == "world" else 1
    generator = torch.Generator().manual_seed(50 + world_size + positions)
    table = torch.randn(VOCAB, HIDDEN, generator=generator).to(DTYPES[dtype])
    hidden = torch.randn(positions, HIDDEN, generator=generator).to(DTYPES[dtype])
    results = run_ranks([adapters.parallel_lm_head(hidden, _padded_shard(table, r, tp_size), VOCAB, tp=(r, tp_size))
                         for r in _ranks(world_size, tp_size)])
    what = f"parallel_lm_head ({dtype}, V={VOCAB}, tp={tp_size}, {positions} positions, logits = hidden @ W.T)"
    # whole dot products of HIDDEN terms, rounded once into the dtype
    assert_ranks_close(what, [r.value for r in results], F.linear(hidden.double(), table.double()), DTYPES[dtype],
                       tolerance(DTYPES[dtype], HIDDEN, roundings=1))
    assert_unchanged(what, [changed(r, ("hidden_states", "weight_shard")) for r in results])
    assert_collectives(what, results, {SEAM_ALL_GATHER: 1})


@pytest.mark.task("05-vocab-parallelism/vocab-embedding")
@pytest.mark.error_case
def test_vocab_embedding_rejects_a_wrong_shard(impl):
    ids, shard = torch.arange(VOCAB), torch.randn(VOCAB - 1, HIDDEN)  # at tp = 1 the shard is the whole table
    assert_value_error(f"vocab_parallel_embedding given 10 rows for V={VOCAB} at tp=1",
                       lambda: adapters.value(impl, adapters.vocab_parallel_embedding(ids, shard, VOCAB)))


@pytest.mark.task("05-vocab-parallelism/lm-head")
@pytest.mark.error_case
def test_lm_head_rejects_a_wrong_shard(impl):
    hidden, shard = torch.randn(2, HIDDEN), torch.randn(VOCAB + 1, HIDDEN)
    assert_value_error(f"parallel_lm_head given 12 rows for V={VOCAB} at tp=1",
                       lambda: adapters.value(impl, adapters.parallel_lm_head(hidden, shard, VOCAB)))
