"""Grades chapter 01: a column-parallel slice (every rank simulated in this process) and a
row-parallel forward on real ranks, both against one plain `F.linear` on the full weight."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from exercises.grader import adapters
from exercises.grader.checks import assert_counts, assert_ranks_close, values
from exercises.grader.ranks import RankContext
from minisgl.distributed import set_tp_info

TOKENS, IN_FEATURES, OUT_FEATURES = 5, 24, 12  # 24 and 12 split evenly at tp = 2, 3 and 4


def _linear_case(seed: int, bias: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(TOKENS, IN_FEATURES, generator=generator)
    weight = torch.randn(OUT_FEATURES, IN_FEATURES, generator=generator)
    b = torch.randn(OUT_FEATURES, generator=generator) if bias else None
    return x, weight, b


@pytest.fixture
def tp_info_restored():
    yield
    set_tp_info(0, 1)


@pytest.mark.task("01-tp-first-principles/column-forward")
@pytest.mark.parametrize("bias", [False, True], ids=["no-bias", "bias"])
def test_column_forward(impl, world_size, bias, tp_info_restored):
    x, weight, b = _linear_case(seed=world_size, bias=bias)
    expected = F.linear(x, weight, b).chunk(world_size, dim=-1)  # rank r owns output columns r*out/tp ..
    outputs = []
    for rank in range(world_size):
        set_tp_info(rank, world_size)  # what each rank's process would see
        outputs.append(adapters.column_parallel_forward(impl, x, weight, b))
    # Each rank's matmul is smaller than the reference one, so its blocking (and float rounding) may differ.
    assert_ranks_close(f"column_parallel_forward (tp={world_size}, slices of x @ W.T + b)", outputs, list(expected))


def _row_job(ctx: RankContext, impl: str, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None):
    x_local = x.chunk(ctx.world_size, dim=-1)[ctx.rank]  # [tokens, in / tp]
    b = None if bias is None else bias.to(ctx.device)
    return adapters.row_parallel_forward(impl, x_local.to(ctx.device), weight.to(ctx.device), b).cpu()


@pytest.mark.task("01-tp-first-principles/row-forward")
@pytest.mark.timeout(180)
@pytest.mark.parametrize("bias", [False, True], ids=["no-bias", "bias"])
def test_row_forward(impl, run_ranks, world_size, bias):
    x, weight, b = _linear_case(seed=10 + world_size, bias=bias)
    results = run_ranks(_row_job, impl=impl, x=x, weight=weight, bias=b)
    # The all-reduce adds tp partial sums: a different summation order than one full matmul.
    assert_ranks_close(f"row_parallel_forward (tp={world_size}, x @ W.T + b on every rank)",
                       values(results), F.linear(x, weight, b))
    assert_counts("row_parallel_forward", results, all_reduce=1)
