"""Comparisons that explain themselves: which rank is wrong, by how much, and where it starts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from .outcomes import WrongAnswer
from .ranks import RankResult

# fp32 tolerances for results whose summation order differs from the reference (a sharded matmul
# adds its partial sums in a different order than one big matmul does).
RTOL, ATOL = 1e-5, 1e-5


def mismatch(actual: Any, expected: torch.Tensor, rtol: float = RTOL, atol: float = ATOL) -> str | None:
    """None when `actual` matches `expected`; else one line: shape, dtype, or max error + first bad index."""
    if not isinstance(actual, torch.Tensor):
        return f"returned {type(actual).__name__}, expected a tensor of shape {tuple(expected.shape)}"
    if actual.shape != expected.shape:
        return f"shape {tuple(actual.shape)}, expected {tuple(expected.shape)}"
    if actual.dtype != expected.dtype:
        return f"dtype {actual.dtype}, expected {expected.dtype}"
    actual = actual.detach().cpu()
    try:
        torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol)
        return None
    except AssertionError:
        pass
    bad = ~torch.isclose(actual, expected, rtol=rtol, atol=atol)
    first = tuple(int(i) for i in bad.nonzero()[0])
    error = (actual - expected).abs()
    worst = tuple(int(i) for i in torch.unravel_index(error.argmax(), error.shape))
    return (f"{int(bad.sum())} of {bad.numel()} values wrong; max abs error {error.max().item():.4g} at {worst}; "
            f"first bad index {first}: got {actual[first].item():.6g}, expected {expected[first].item():.6g}")


def assert_ranks_close(what: str, actual: Sequence[Any], expected: Sequence[torch.Tensor] | torch.Tensor,
                       rtol: float = RTOL, atol: float = ATOL) -> None:
    """Compare every rank's tensor with its expected one (or the same one for all); list each bad rank."""
    if isinstance(expected, torch.Tensor):
        expected = [expected] * len(actual)
    bad = [(rank, msg) for rank, (a, e) in enumerate(zip(actual, expected)) if (msg := mismatch(a, e, rtol, atol))]
    if bad:
        lines = [f"{what}: {len(bad)} of {len(actual)} ranks wrong"] + [f"  rank {r}: {m}" for r, m in bad]
        raise WrongAnswer("\n".join(lines))


def assert_counts(what: str, results: Sequence[RankResult], **expected: int) -> None:
    """Every rank sent exactly the expected number of each collective through minisgl.distributed."""
    for rank, result in enumerate(results):
        for name, count in expected.items():
            got = result.counts.get(name, 0)
            if got != count:
                raise WrongAnswer(
                    f"{what}: rank {rank} called minisgl.distributed.{name} {got} times, expected {count}"
                    " (every collective must go through minisgl.distributed, once per forward)"
                )


def values(results: Sequence[RankResult]) -> list[Any]:
    return [result.value for result in results]
