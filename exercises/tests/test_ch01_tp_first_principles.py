"""Grades chapter 01 on real ranks: each rank gets its shard of one plain linear layer and must
produce its slice (column) or the whole result (row), in fp32 and bf16, at tp = 1 and with the
world size's ranks, without touching its inputs; against one float64 `F.linear` on the full weight."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from exercises.grader import adapters
from exercises.grader.checks import (
    DTYPES,
    SEAM_ALL_REDUCE,
    assert_collectives,
    assert_ranks_close,
    assert_ranks_raise_value_error,
    assert_unchanged,
    assert_value_error,
    changed,
    tolerance,
)

TOKENS, IN_FEATURES, OUT_FEATURES = 5, 36, 20  # both split evenly at tp = 1, 2 and 4
CASES = [(dtype, bias, tp) for dtype in DTYPES for bias in (False, True) for tp in ("world", "tp1")]
IDS = [f"{dtype}-{'bias' if bias else 'no-bias'}-{tp}" for dtype, bias, tp in CASES]


def _linear_case(seed: int, bias: bool, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(TOKENS, IN_FEATURES, generator=generator).to(dtype)
    weight = torch.randn(OUT_FEATURES, IN_FEATURES, generator=generator).to(dtype)
    b = torch.randn(OUT_FEATURES, generator=generator).to(dtype) if bias else None
    return x, weight, b


def _shard(tensor: torch.Tensor | None, tp_size: int, rank: int, dim: int) -> torch.Tensor | None:
    """Rank `rank`'s part of `tensor` (a copy: a rank is sent only its own part)."""
    return None if tensor is None else tensor.chunk(tp_size, dim=dim)[rank].clone()


def _column_requests(world_size: int, tp_size: int, x, weight, bias) -> list[adapters.Request]:
    ranks = [rank if tp_size > 1 else 0 for rank in range(world_size)]  # at tp = 1 every rank is rank 0 of 1
    return [adapters.column_parallel_forward(x, _shard(weight, tp_size, r, 0), _shard(bias, tp_size, r, 0),
                                             tp=(r, tp_size)) for r in ranks]


def _row_requests(world_size: int, tp_size: int, x, weight, bias) -> list[adapters.Request]:
    ranks = [rank if tp_size > 1 else 0 for rank in range(world_size)]
    return [adapters.row_parallel_forward(_shard(x, tp_size, r, -1), _shard(weight, tp_size, r, 1), bias,
                                          tp=(r, tp_size)) for r in ranks]


def _reference(x, weight, bias) -> torch.Tensor:
    return F.linear(x.double(), weight.double(), None if bias is None else bias.double())


@pytest.mark.task("01-tp-first-principles/column-forward")
@pytest.mark.timeout(180)
@pytest.mark.parametrize("dtype,bias,tp", CASES, ids=IDS)
def test_column_forward(run_ranks, world_size, dtype, bias, tp):
    tp_size = world_size if tp == "world" else 1
    x, weight, b = _linear_case(seed=world_size, bias=bias, dtype=DTYPES[dtype])
    results = run_ranks(_column_requests(world_size, tp_size, x, weight, b))
    full = _reference(x, weight, b)
    expected = list(full.chunk(tp_size, dim=-1)) if tp_size > 1 else [full] * world_size
    what = f"column_parallel_forward ({dtype}, tp={tp_size}: x @ weight_shard.T + bias_shard)"
    # whole dot products of IN_FEATURES terms, rounded once into the dtype
    assert_ranks_close(what, [r.value for r in results], expected, DTYPES[dtype],
                       tolerance(DTYPES[dtype], IN_FEATURES, roundings=2))
    assert_unchanged(what, [changed(r, ("x", "weight_shard", "bias_shard")) for r in results])
    assert_collectives(what, results, {})


@pytest.mark.task("01-tp-first-principles/row-forward", weight=2)
@pytest.mark.timeout(180)
@pytest.mark.parametrize("dtype,bias,tp", CASES, ids=IDS)
def test_row_forward(run_ranks, world_size, dtype, bias, tp):
    tp_size = world_size if tp == "world" else 1
    x, weight, b = _linear_case(seed=10 + world_size, bias=bias, dtype=DTYPES[dtype])
    results = run_ranks(_row_requests(world_size, tp_size, x, weight, b))
    what = f"row_parallel_forward ({dtype}, tp={tp_size}: x @ W.T + bias on every rank)"
    # tp partial sums, each rounded into the dtype, added by the all-reduce, then the bias
    assert_ranks_close(what, [r.value for r in results], _reference(x, weight, b), DTYPES[dtype],
                       tolerance(DTYPES[dtype], IN_FEATURES, roundings=2 * tp_size + 1))
    assert_unchanged(what, [changed(r, ("x_local", "weight_shard", "bias")) for r in results])
    assert_collectives(what, results, {SEAM_ALL_REDUCE: 1})


@pytest.mark.task("01-tp-first-principles/column-forward")
@pytest.mark.error_case
def test_column_forward_rejects_mismatched_shapes(impl):
    x, weight, b = _linear_case(seed=1, bias=True, dtype=torch.float32)
    assert_value_error("column_parallel_forward given x with 35 features for a weight shard of 36",
                       lambda: adapters.value(impl, adapters.column_parallel_forward(x[:, :35], weight, b)))
    assert_value_error("column_parallel_forward given a bias of 19 for a weight shard of 20 rows",
                       lambda: adapters.value(impl, adapters.column_parallel_forward(x, weight, b[:19])))


@pytest.mark.task("01-tp-first-principles/row-forward")
@pytest.mark.error_case
@pytest.mark.timeout(180)
def test_row_forward_rejects_mismatched_shapes(run_ranks, world_size):
    # every rank gets the same wrong shapes and must raise before any collective: a rank that raised
    # after the all-reduce would have made one (and, with a rank raising first, left the others hanging)
    x, weight, b = _linear_case(seed=2, bias=True, dtype=torch.float32)
    parts = [(_shard(x, world_size, r, -1), _shard(weight, world_size, r, 1)) for r in range(world_size)]
    short_x = run_ranks([adapters.row_parallel_forward(x_r[:, :-1], w_r, b, tp=(r, world_size))
                         for r, (x_r, w_r) in enumerate(parts)], allow_errors=True)
    assert_ranks_raise_value_error("row_parallel_forward given x_local with one feature too few for its shard",
                                   short_x)
    short_bias = run_ranks([adapters.row_parallel_forward(x_r, w_r, b[:19], tp=(r, world_size))
                            for r, (x_r, w_r) in enumerate(parts)], allow_errors=True)
    assert_ranks_raise_value_error("row_parallel_forward given a bias of 19 for a weight of 20 rows", short_bias)
