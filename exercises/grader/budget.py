"""Each task's time budget in one grade (issue 41): every test of a task adds its share
(`--task-budget` seconds, or the task marker's `budget_s=`) to the task's wall-time budget. Time
spent in a test's setup, call and teardown is charged to its task; no job of the task waits past
what is left (ranks.py), and once the budget is spent the task's remaining tests fail at once. A
job that always waits just under the rank timeout therefore costs its task's budget once, and the
grade ends in about the sum of the budgets, whatever the learner's code does.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import pytest

from .outcomes import WrongAnswer

Key = tuple[str, str]  # (implementation spec, task id)


class OverBudget(WrongAnswer):
    """A test not run: its task has spent its time budget."""


class Budgets:
    """The budget of each (implementation, task) of this grade, and the time each has spent."""

    def __init__(self, per_test_s: float) -> None:
        self.per_test_s = per_test_s
        self.budget: dict[Key, float] = {}
        self.spent: dict[Key, float] = {}
        self._started: dict[Key, float] = {}  # the test of this task running now, since when

    def plan(self, tests: Iterable[tuple[Key, pytest.Mark]]) -> None:
        """Budgets of the tests that will run (after `-k` / `-m` deselect), from their task markers."""
        self.budget.clear()
        for key, marker in tests:
            self.budget[key] = self.budget.get(key, 0.0) + float(marker.kwargs.get("budget_s", self.per_test_s))

    def left(self, key: Key) -> float:
        """Seconds the task may still run (the running test's time counted); unlimited if unplanned."""
        if key not in self.budget:
            return float("inf")
        running = time.monotonic() - self._started[key] if key in self._started else 0.0
        return self.budget[key] - self.spent.get(key, 0.0) - running

    def check(self, key: Key) -> float:
        """The seconds left to `key`'s task; OverBudget when there are none."""
        left = self.left(key)
        if left <= 0:
            raise OverBudget(f"task {key[1]} used its {self.budget[key]:.0f} s time budget (--task-budget); its "
                             "remaining tests were not run")
        return left

    def start(self, key: Key) -> None:
        """Called before a test of `key` runs: OverBudget when its task has nothing left."""
        self.check(key)
        self._started[key] = time.monotonic()

    def stop(self, key: Key) -> None:
        if key in self._started:
            self.spent[key] = self.spent.get(key, 0.0) + time.monotonic() - self._started.pop(key)


_CURRENT = Budgets(float("inf"))


def configure(per_test_s: float) -> Budgets:
    """The grade's budgets (exercises/conftest.py, from --task-budget)."""
    global _CURRENT
    _CURRENT = Budgets(per_test_s)
    return _CURRENT


def current() -> Budgets:
    return _CURRENT


def job_limit(impl: str, task: str, limit_s: float) -> float:
    """How long a job of (impl, task) may wait: `limit_s`, or what is left of the task's budget if
    less; OverBudget when nothing is (a test that runs many jobs stops at its task's budget)."""
    return min(limit_s, _CURRENT.check((impl, task)))
