"""pytest wiring of the grader (chapter 00): the implementation under test (`--impl`), the world
sizes of multi-rank tests, the pools of real ranks, one `chNN` marker per chapter derived from each
test's task id, and the grade report. Options are registered in the repository's root conftest.py."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from exercises.grader.adapters import resolve_impl
from exercises.grader.chapters import chapter_of
from exercises.grader.outcomes import ImplementationError
from exercises.grader.ranks import RankPools, RankResult
from exercises.grader.report import GradeReport
from minisgl.cpu.kernels import cpu_kernels


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(GradeReport(config), "minisgl-grade-report")


def _impls(config: pytest.Config) -> dict[str, set[str] | None]:
    """Each resolved spec of --impl `a,b@ch05,b@ch07,...` -> the chapters it is graded on (None: all)."""
    impls: dict[str, set[str] | None] = {}
    for entry in config.getoption("--impl").split(","):
        spec, _, chapter = entry.strip().partition("@ch")
        try:
            resolved = resolve_impl(spec)
        except ImplementationError as error:
            raise pytest.UsageError(str(error)) from None
        chapters = impls.get(resolved, set())
        impls[resolved] = None if chapters is None or not chapter else chapters | {chapter}
    return impls


@pytest.hookimpl(tryfirst=True)  # before `-m` / `-k` deselect: the markers and the points must exist by then
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    impls = _impls(config)
    kept, dropped = [], []
    for item in items:
        marker = item.get_closest_marker("task")
        if marker is None:
            kept.append(item)
            continue
        chapter = chapter_of(marker.args[0])
        item.add_marker(getattr(pytest.mark, f"ch{chapter}"))
        impl = getattr(item, "callspec", None) and item.callspec.params.get("impl")
        chapters = impls.get(impl) if impl else None
        (dropped if chapters is not None and chapter not in chapters else kept).append(item)
    if dropped:  # an `--impl SPEC@chNN` is graded on its chapters only
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
    config.pluginmanager.get_plugin("minisgl-grade-report").assign_points(items)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "world_size" in metafunc.fixturenames:
        sizes = [int(size) for size in metafunc.config.getoption("--world-sizes").split(",")]
        metafunc.parametrize("world_size", sizes, ids=[f"ws{size}" for size in sizes])
    impls = _impls(metafunc.config)
    if "impl" in metafunc.fixturenames and (len(impls) > 1 or any(c is not None for c in impls.values())):
        metafunc.parametrize("impl", list(impls), ids=[Path(spec).name for spec in impls], scope="session")


@pytest.fixture(scope="session")
def impl(pytestconfig: pytest.Config) -> str:
    """The implementation spec every adapter call receives (also sent to spawned ranks)."""
    return next(iter(_impls(pytestconfig)))


@pytest.fixture(scope="session")
def rank_pools(pytestconfig: pytest.Config) -> Iterator[RankPools]:
    # The reference answers use minisgl's layers, whose C kernels compile on first use (seconds, more on
    # a busy machine): build them here, once, so that no rank spends its time limit compiling them.
    cpu_kernels()
    pools = RankPools(pytestconfig.getoption("--rank-timeout"))
    yield pools
    pools.close()


@pytest.fixture
def run_ranks(rank_pools: RankPools, world_size: int) -> Callable[..., list[RankResult]]:
    """`run_ranks(job, **kwargs)`: run `job(ctx, **kwargs)` on `world_size` real ranks at once."""

    def run(job: Callable[..., Any], **kwargs: Any) -> list[RankResult]:
        return rank_pools.run(job, world_size, **kwargs)

    return run
