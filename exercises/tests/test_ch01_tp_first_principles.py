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
    assert_unchanged,
    assert_value_error,
    tolerance,
    watch,
)
from exercises.grader.ranks import RankContext, tp_view

TOKENS, IN_FEATURES, OUT_FEATURES = 5, 36, 20  # both split evenly at tp = 1, 2 and 4
CASES = [(dtype, bias, tp) for dtype in DTYPES for bias in (False, True) for tp in ("world", "tp1")]
IDS = [f"{dtype}-{'bias' if bias else 'no-bias'}-{tp}" for dtype, bias, tp in CASES]


def _linear_case(seed: int, bias: bool, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(TOKENS, IN_FEATURES, generator=generator).to(dtype)
    weight = torch.randn(OUT_FEATURES, IN_FEATURES, generator=generator).to(dtype)
    b = torch.randn(OUT_FEATURES, generator=generator).to(dtype) if bias else None
    return x, weight, b


def _on(ctx: RankContext, tensor: torch.Tensor | None) -> torch.Tensor | None:
    return None if tensor is None else tensor.to(ctx.device)


def _column_job(ctx: RankContext, impl: str, tp_size: int, x, weight, bias):
    rank = ctx.rank if tp_size > 1 else 0
    inputs = {"x": _on(ctx, x), "weight_shard": _on(ctx, weight.chunk(tp_size, dim=0)[rank]),
              "bias_shard": None if bias is None else _on(ctx, bias.chunk(tp_size, dim=0)[rank])}
    with tp_view(rank, tp_size):
        out, changed = watch(inputs, lambda: adapters.column_parallel_forward(impl, *inputs.values()))
    return (out.cpu() if isinstance(out, torch.Tensor) else out), changed


def _row_job(ctx: RankContext, impl: str, tp_size: int, x, weight, bias):
    rank = ctx.rank if tp_size > 1 else 0
    inputs = {"x_local": _on(ctx, x.chunk(tp_size, dim=-1)[rank]),
              "weight_shard": _on(ctx, weight.chunk(tp_size, dim=1)[rank]), "bias": _on(ctx, bias)}
    with tp_view(rank, tp_size):
        out, changed = watch(inputs, lambda: adapters.row_parallel_forward(impl, *inputs.values()))
    return (out.cpu() if isinstance(out, torch.Tensor) else out), changed


def _reference(x, weight, bias) -> torch.Tensor:
    return F.linear(x.double(), weight.double(), None if bias is None else bias.double())


@pytest.mark.task("01-tp-first-principles/column-forward")
@pytest.mark.timeout(180)
@pytest.mark.parametrize("dtype,bias,tp", CASES, ids=IDS)
def test_column_forward(impl, run_ranks, world_size, dtype, bias, tp):
    tp_size = world_size if tp == "world" else 1
    x, weight, b = _linear_case(seed=world_size, bias=bias, dtype=DTYPES[dtype])
    results = run_ranks(_column_job, impl=impl, tp_size=tp_size, x=x, weight=weight, bias=b)
    full = _reference(x, weight, b)
    expected = list(full.chunk(tp_size, dim=-1)) if tp_size > 1 else [full] * world_size
    what = f"column_parallel_forward ({dtype}, tp={tp_size}: x @ weight_shard.T + bias_shard)"
    # whole dot products of IN_FEATURES terms, rounded once into the dtype
    assert_ranks_close(what, [r.value[0] for r in results], expected, DTYPES[dtype],
                       tolerance(DTYPES[dtype], IN_FEATURES, roundings=2))
    assert_unchanged(what, [r.value[1] for r in results])
    assert_collectives(what, results, {})


@pytest.mark.task("01-tp-first-principles/row-forward", weight=2)
@pytest.mark.timeout(180)
@pytest.mark.parametrize("dtype,bias,tp", CASES, ids=IDS)
def test_row_forward(impl, run_ranks, world_size, dtype, bias, tp):
    tp_size = world_size if tp == "world" else 1
    x, weight, b = _linear_case(seed=10 + world_size, bias=bias, dtype=DTYPES[dtype])
    results = run_ranks(_row_job, impl=impl, tp_size=tp_size, x=x, weight=weight, bias=b)
    what = f"row_parallel_forward ({dtype}, tp={tp_size}: x @ W.T + bias on every rank)"
    # tp partial sums, each rounded into the dtype, added by the all-reduce, then the bias
    assert_ranks_close(what, [r.value[0] for r in results], _reference(x, weight, b), DTYPES[dtype],
                       tolerance(DTYPES[dtype], IN_FEATURES, roundings=2 * tp_size + 1))
    assert_unchanged(what, [r.value[1] for r in results])
    assert_collectives(what, results, {SEAM_ALL_REDUCE: 1})


@pytest.mark.task("01-tp-first-principles/column-forward")
def test_column_forward_rejects_mismatched_shapes(impl):
    x, weight, b = _linear_case(seed=1, bias=True, dtype=torch.float32)
    assert_value_error("column_parallel_forward given x with 35 features for a weight shard of 36",
                       lambda: adapters.column_parallel_forward(impl, x[:, :35], weight, b))
    assert_value_error("column_parallel_forward given a bias of 19 for a weight shard of 20 rows",
                       lambda: adapters.column_parallel_forward(impl, x, weight, b[:19]))


@pytest.mark.task("01-tp-first-principles/row-forward")
def test_row_forward_rejects_mismatched_shapes(impl):
    x, weight, b = _linear_case(seed=2, bias=True, dtype=torch.float32)
    # at tp = 1 in this process: the check must come before any collective
    assert_value_error("row_parallel_forward given x_local with 35 features for a weight shard of 36",
                       lambda: adapters.row_parallel_forward(impl, x[:, :35], weight, b))
    assert_value_error("row_parallel_forward given a bias of 19 for a weight of 20 rows",
                       lambda: adapters.row_parallel_forward(impl, x, weight, b[:19]))
