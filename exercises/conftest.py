"""pytest wiring of the grader (chapter 00): the implementation under test (`--impl`), the world
sizes of multi-rank tests, the sandbox the learner's code runs in (`--sandbox-user`,
`--rank-timeout`), each task's time budget (`--task-budget`), one `chNN` marker per chapter derived
from each test's task id, and the grade report. Everything the grader's process will import is
imported at collection, before any learner code runs (preload.py). Options are registered in the
repository's root conftest.py."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from exercises.grader import adapters, budget, preload, quiz, sandbox
from exercises.grader.chapters import chapter_of
from exercises.grader.off_limits import CAPSTONE
from exercises.grader.outcomes import ImplementationError
from exercises.grader.ranks import RankResult
from exercises.grader.report import GradeReport


def pytest_configure(config: pytest.Config) -> None:
    sandbox.configure(config.getoption("--sandbox-user") or None, config.getoption("--rank-timeout"))
    budget.configure(config.getoption("--task-budget"))
    config.pluginmanager.register(GradeReport(config), "minisgl-grade-report")


def _impls(config: pytest.Config) -> dict[str, set[str] | None]:
    """Each resolved spec of --impl `a,b@ch05,b@ch07,...` -> the chapters it is graded on (None: all)."""
    impls: dict[str, set[str] | None] = {}
    for entry in config.getoption("--impl").split(","):
        spec, _, chapter = entry.strip().partition("@ch")
        try:
            resolved = adapters.resolve_impl(spec)
        except ImplementationError as error:
            raise pytest.UsageError(str(error)) from None
        chapters = impls.get(resolved, set())
        impls[resolved] = None if chapters is None or not chapter else chapters | {chapter}
    return impls


def _task(item: pytest.Item) -> str | None:
    marker = item.get_closest_marker("task")
    return marker.args[0] if marker else None


@pytest.hookimpl(tryfirst=True)  # before `-m` / `-k` deselect: the markers and the points must exist by then
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    impls = _impls(config)
    kept, dropped = [], []
    for item in items:
        task = _task(item)
        if task is None:
            kept.append(item)
            continue
        chapter = chapter_of(task)
        item.add_marker(getattr(pytest.mark, f"ch{chapter}"))
        impl = getattr(item, "callspec", None) and item.callspec.params.get("impl")
        chapters = impls.get(impl) if impl else None
        (dropped if chapters is not None and chapter not in chapters else kept).append(item)
    if dropped:  # an `--impl SPEC@chNN` is graded on its chapters only
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
    for spec in impls:  # quiz answers read now, before any learner code runs anywhere
        for chapter in quiz.quiz_chapters():
            quiz.answers(Path(spec) / "quizzes" / f"ch{chapter}.py")
    preload.everything(capstone=any(_task(item) == CAPSTONE for item in kept))
    config.pluginmanager.get_plugin("minisgl-grade-report").assign_points(items)


def pytest_collection_finish(session: pytest.Session) -> None:
    """The capstone's tests last (in order otherwise): its copy of minisgl keeps functions the other
    tasks' copy cuts out, so the sandbox switches to it once and never back."""
    session.items.sort(key=lambda item: _task(item) == CAPSTONE)
    budget.current().plan((_budget_key(item), item.get_closest_marker("task")) for item in session.items if _task(item))


def _budget_key(item: pytest.Item) -> budget.Key:
    """(the implementation graded, the task) a test's time is charged to."""
    impl = getattr(item, "callspec", None) and item.callspec.params.get("impl")
    return impl or next(iter(_impls(item.config))), _task(item)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if _task(item):
        budget.current().start(_budget_key(item))  # OverBudget: the test fails at once, unrun


@pytest.hookimpl(hookwrapper=True, trylast=True)
def pytest_runtest_teardown(item: pytest.Item):
    yield
    if _task(item):
        budget.current().stop(_budget_key(item))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "world_size" in metafunc.fixturenames:
        sizes = [int(size) for size in metafunc.config.getoption("--world-sizes").split(",")]
        metafunc.parametrize("world_size", sizes, ids=[f"ws{size}" for size in sizes])
    impls = _impls(metafunc.config)
    if "impl" in metafunc.fixturenames and (len(impls) > 1 or any(c is not None for c in impls.values())):
        metafunc.parametrize("impl", list(impls), ids=[Path(spec).name for spec in impls], scope="session")


@pytest.fixture(scope="session")
def impl(pytestconfig: pytest.Config) -> str:
    """The implementation spec every adapter call receives."""
    return next(iter(_impls(pytestconfig)))


@pytest.fixture(scope="session", autouse=True)
def grader_sandbox(request: pytest.FixtureRequest) -> Iterator[sandbox.Sandbox]:
    """The run's sandbox (sandbox.py), closed - every process it started killed - at the end."""
    # The learner's minisgl calls its C kernels, which compile on first use (seconds, more on a busy
    # machine): build them here, once; the sandbox hands the built library to its workers.
    from minisgl.cpu.kernels import cpu_kernels

    cpu_kernels()
    try:
        box = sandbox.current()
        if any(_task(item) and not _task(item).endswith("/quiz") for item in request.session.items):
            box.start()  # quizzes alone run no learner code
    except sandbox.SandboxError as error:
        pytest.exit(f"the grader's sandbox could not start: {error}", returncode=3)
    yield box
    sandbox.shutdown()


@pytest.fixture
def run_ranks(impl: str, world_size: int) -> Callable[..., list[RankResult]]:
    """`run_ranks(requests, ...)`: request r on rank r of `world_size` real ranks at once
    (adapters.on_ranks)."""

    def run(requests: list[adapters.Request], **kwargs: Any) -> list[RankResult]:
        assert len(requests) == world_size, f"{len(requests)} requests for {world_size} ranks"
        return adapters.on_ranks(impl, requests, **kwargs)

    return run
