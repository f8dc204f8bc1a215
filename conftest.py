"""Options shared by the engine tests and the course grader, registered at the repository root so
that `pytest tests exercises --impl solutions` accepts them whichever folder pytest collects first.
The grader itself lives in `exercises/` (chapter 00 explains how to use it)."""

from __future__ import annotations

import pytest

from exercises.grader.chapters import CHAPTERS


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("minisgl course grader")
    group.addoption(
        "--impl", default="exercises",
        help="what the exercise tests grade: 'exercises' (your files, default), 'solutions', "
        "a package directory, or a top-level package name; several, comma-separated, are graded "
        "one after the other, and 'SPEC@chNN' grades SPEC on chapter NN only (the grader's self-test)",
    )
    group.addoption("--world-sizes", default="2,4", help="comma-separated world sizes of the multi-rank tests")
    group.addoption("--results", default="results.json", help="where the Gradescope-style results file goes")
    group.addoption("--rank-timeout", type=float, default=30.0,
                    help="seconds one job may run before its ranks are declared hung and killed")
    group.addoption("--task-budget", type=float, default=20.0,
                    help="seconds of wall time each test of a task adds to the task's budget (a task of 6 tests: "
                    "120 s); once a task has spent it, its remaining tests fail at once")
    group.addoption("--sandbox-user", default="",
                    help="run learner code as this unprivileged user (root only; run_autograder sets it); "
                    "default: this user, in processes of their own")


def pytest_configure(config: pytest.Config) -> None:
    for number, slug in CHAPTERS.items():
        config.addinivalue_line("markers", f"ch{number}: exercises and quiz of chapter {slug}")
    config.addinivalue_line("markers", "task(task_id, weight=1): a graded test of `task_id`; its tests share the task's points by weight")
    config.addinivalue_line("markers", "error_case: a test of a task's errors; it scores once the task's value tests "
                            "all pass in the same grade (exercises/grader/scoring.py)")
