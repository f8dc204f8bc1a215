"""Grades chapter 05 on real ranks over each contract's whole small domain, every point of a test in
one job per rank: every vocabulary V = 1 .. 3 * tp at tp = 1 and at the world size (so every padding
pattern: no padding, one short shard, two padded shards, shards that are all padding), inputs in
contiguous and in non-contiguous memory, no tokens at all; fp32 and bf16. Every id (the shard
boundaries included) goes through the embedding, the LM head must trim its padding, the collective
must carry this rank's result (its shape is checked), inputs must come back untouched; a shard of the
wrong rows is refused on every rank, each seeing its own rank, before any collective."""

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
    assert_ranks_raise_value_error,
    assert_returned,
    assert_unchanged,
    changed,
    tolerance,
)

HIDDEN = 6
LAYOUTS = ("contiguous", "non-contiguous")


def _shard_size(vocab: int, tp: int) -> int:
    return -(-vocab // tp)


def _padded_shard(table: torch.Tensor, rank: int, tp: int) -> torch.Tensor:
    """Rows [rank * s, (rank + 1) * s) of the table, s = ceil(V / tp), zero-padded past V."""
    vocab, shard_size = table.shape[0], _shard_size(table.shape[0], tp)
    padded = torch.zeros(shard_size * tp, table.shape[1], dtype=table.dtype)
    padded[:vocab] = table
    return padded[rank * shard_size:(rank + 1) * shard_size].clone()


def _ids(vocab: int, tp: int) -> torch.Tensor:
    """Every id once in a shuffled order, then each shard's first and last id again."""
    shard_size = _shard_size(vocab, tp)
    edges = [i for r in range(tp) for i in (r * shard_size - 1, r * shard_size, (r + 1) * shard_size - 1)]
    edges = [i for i in edges if 0 <= i < vocab]
    return torch.cat([torch.randperm(vocab, generator=torch.Generator().manual_seed(vocab)), torch.tensor(edges)])


def _domain(world_size: int) -> list[tuple[int, int, str]]:
    """(tp, V, layout): tp = 1 (every rank on its own) and the world size, V = 1 .. 3 * tp."""
    return [(tp, vocab, layout) for tp in (1, world_size) for vocab in range(1, 3 * tp + 1) for layout in LAYOUTS]


def _tp_rank(rank: int, tp: int) -> int:
    """A rank's rank in the tp view: itself, or 0 at tp = 1."""
    return rank if tp > 1 else 0


def _table(vocab: int, dtype: str, salt: int) -> torch.Tensor:
    return torch.randn(vocab, HIDDEN, generator=torch.Generator().manual_seed(100 * vocab + salt)).to(DTYPES[dtype])


def _embedding(ids: torch.Tensor, table: torch.Tensor, rank: int, tp: int, layout: str) -> adapters.Request:
    request = adapters.vocab_parallel_embedding(ids, _padded_shard(table, rank, tp), table.shape[0], tp=(rank, tp))
    return adapters.noncontiguous(request, 0, 1) if layout != "contiguous" else request


@pytest.mark.task("05-vocab-parallelism/vocab-embedding")
@pytest.mark.timeout(180)
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_vocab_embedding(impl, world_size, dtype):
    points = [(tp, vocab, layout, _ids(vocab, tp)) for tp, vocab, layout in _domain(world_size)]
    points += [(tp, 5, "contiguous", torch.zeros(0, dtype=torch.int64)) for tp in (1, world_size)]  # no tokens
    tables = {vocab: _table(vocab, dtype, 5) for _, vocab, _, _ in points}
    calls = [[_embedding(ids, tables[vocab], _tp_rank(rank, tp), tp, layout) for tp, vocab, layout, ids in points]
             for rank in range(world_size)]
    labels = [f"V={vocab}, tp={tp}, {layout} inputs, {len(ids)} tokens" for tp, vocab, layout, ids in points]
    for (tp, vocab, layout, ids), results in zip(points, adapters.on_ranks_batched(impl, calls, labels)):
        what = (f"vocab_parallel_embedding ({dtype}, V={vocab}, tp={tp}: shards of {_shard_size(vocab, tp)} rows, "
                f"{layout} inputs, {len(ids)} tokens; row i = table[ids[i]], ids {ids.tolist()})")
        assert_returned(what, results)
        # exact: one rank adds its row, the others add zeros
        assert_ranks_close(what, [r.value for r in results], F.embedding(ids, tables[vocab]).double(),
                           DTYPES[dtype], 0.0)
        assert_unchanged(what, [changed(r, ("input_ids", "weight_shard")) for r in results])
        assert_collectives(what, results, {SEAM_ALL_REDUCE: 1},
                           {SEAM_ALL_REDUCE: ((len(ids), HIDDEN), "this rank's [tokens, hidden] rows")})


@pytest.mark.task("05-vocab-parallelism/lm-head")
@pytest.mark.timeout(180)
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_lm_head(impl, world_size, dtype):
    # every V in both layouts (3 positions in contiguous memory, 1 in non-contiguous), and no positions at
    # all with shards of every kind: all padding (V = 1), one short, none short
    points = [(tp, vocab, layout, 3 if layout == "contiguous" else 1) for tp, vocab, layout in _domain(world_size)]
    points += [(tp, vocab, "contiguous", 0) for tp in (1, world_size) for vocab in sorted({1, tp + 1, 3 * tp})]
    tables = {vocab: _table(vocab, dtype, 50) for _, vocab, _, _ in points}
    generator = torch.Generator().manual_seed(50 + world_size)
    hidden = {n: torch.randn(n, HIDDEN, generator=generator).to(DTYPES[dtype]) for n in (0, 1, 3)}
    calls = []
    for rank in range(world_size):
        mine = []
        for tp, vocab, layout, positions in points:
            request = adapters.parallel_lm_head(hidden[positions], _padded_shard(tables[vocab], _tp_rank(rank, tp), tp),
                                                vocab, tp=(_tp_rank(rank, tp), tp))
            mine.append(adapters.noncontiguous(request, 0, 1) if layout != "contiguous" else request)
        calls.append(mine)
    labels = [f"V={vocab}, tp={tp}, {layout} inputs, {positions} positions" for tp, vocab, layout, positions in points]
    for (tp, vocab, layout, positions), results in zip(points, adapters.on_ranks_batched(impl, calls, labels)):
        shard_size = _shard_size(vocab, tp)
        what = (f"parallel_lm_head ({dtype}, V={vocab}, tp={tp}: shards of {shard_size} rows, {layout} inputs, "
                f"{positions} positions; logits = hidden @ W.T)")
        assert_returned(what, results)
        # whole dot products of HIDDEN terms, rounded once into the dtype
        assert_ranks_close(what, [r.value for r in results],
                           F.linear(hidden[positions].double(), tables[vocab].double()), DTYPES[dtype],
                           tolerance(DTYPES[dtype], HIDDEN, roundings=1))
        assert_unchanged(what, [changed(r, ("hidden_states", "weight_shard")) for r in results])
        assert_collectives(what, results, {SEAM_ALL_GATHER: 1},
                           {SEAM_ALL_GATHER: ((positions, shard_size), "this rank's [n, shard_size] logits")})


def _wrong_shards(world_size: int) -> list[tuple[int, int, int]]:
    """(tp, V, rows): every V = 1 .. 3 * tp with one row too few and one too many."""
    return [(tp, vocab, rows) for tp in (1, world_size) for vocab in range(1, 3 * tp + 1)
            for rows in (_shard_size(vocab, tp) - 1, _shard_size(vocab, tp) + 1)]


def _assert_refused(impl: str, world_size: int, function: str, request) -> None:
    points = _wrong_shards(world_size)
    calls = [[request(torch.randn(rows, HIDDEN), vocab, (_tp_rank(rank, tp), tp)) for tp, vocab, rows in points]
             for rank in range(world_size)]
    for (tp, vocab, rows), results in zip(points, adapters.on_ranks_batched(impl, calls, expect_errors=True)):
        assert_ranks_raise_value_error(f"{function} given {rows} rows for V={vocab} at tp={tp} (shards of "
                                       f"{_shard_size(vocab, tp)} rows), on every rank", results)


@pytest.mark.task("05-vocab-parallelism/vocab-embedding")
@pytest.mark.error_case
@pytest.mark.timeout(180)
def test_vocab_embedding_rejects_a_wrong_shard(impl, world_size):
    _assert_refused(impl, world_size, "vocab_parallel_embedding",
                    lambda shard, v, tp: adapters.vocab_parallel_embedding(torch.arange(v), shard, v, tp=tp))


@pytest.mark.task("05-vocab-parallelism/lm-head")
@pytest.mark.error_case
@pytest.mark.timeout(180)
def test_lm_head_rejects_a_wrong_shard(impl, world_size):
    _assert_refused(impl, world_size, "parallel_lm_head",
                    lambda shard, vocab, tp: adapters.parallel_lm_head(torch.randn(2, HIDDEN), shard, vocab, tp=tp))
