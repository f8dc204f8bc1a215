"""Points that count only with others (issue 41): the rules that keep a grade from being gamed by
code that passes some tests of a task without doing the task. They run once every test of the
grade has run, in the grader's process, on the outcomes it recorded itself.

- A task's *error cases* (tests marked `error_case`: it rejects bad input, names the rank that
  died) count once every *value case* of the task (the tests that check what it returns) passed in
  the same grade: a function that only raises the errors the tests expect earns nothing.
- The capstone (chapter 15) counts once every coding task of the chapters whose functions its
  engine runs (01, 04, 05) passed in the same grade, for the same implementation: those chapters'
  tests are where the grader checks those functions itself, against values only it computes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from .chapters import TASK_POINTS, chapter_of
from .off_limits import CAPSTONE

CAPSTONE_NEEDS = ("01", "04", "05")  # the chapters of the functions the capstone's engine runs (child/tpops.py)
ERRORS_WAIT = "error cases count once the task's value cases pass"


class Outcome(Protocol):
    """What a rule reads and may change of a graded test (report.Record)."""

    task: str
    impl: str
    error_case: bool
    outcome: str
    output: str


def settle(records: Iterable[Outcome]) -> None:
    """Apply every rule: a passed test whose points wait on others that did not pass is failed,
    with a one-line reason. A failed test keeps its own message."""
    graded = [r for r in records if r.outcome != "skipped"]
    by_task: dict[tuple[str, str], list[Outcome]] = {}  # (task, impl) -> its graded tests
    for record in graded:
        by_task.setdefault((record.task, record.impl), []).append(record)
    _error_cases(graded, by_task)
    _capstone(graded, by_task)


def _error_cases(records: list[Outcome], by_task: dict[tuple[str, str], list[Outcome]]) -> None:
    for record in records:
        if record.error_case and record.outcome == "passed":
            values = [r for r in by_task[(record.task, record.impl)] if not r.error_case]
            if not values:
                _fail(record, f"{ERRORS_WAIT}, and none of them ran in this grade")
            elif not all(r.outcome == "passed" for r in values):
                failed = sum(r.outcome != "passed" for r in values)
                _fail(record, f"{ERRORS_WAIT}; {failed} of its {len(values)} value cases did not")


def _capstone(records: list[Outcome], by_task: dict[tuple[str, str], list[Outcome]]) -> None:
    needed = [task for task in TASK_POINTS if chapter_of(task) in CAPSTONE_NEEDS]
    for record in records:
        if record.task != CAPSTONE or record.outcome != "passed":
            continue
        missing = [task for task in needed
                   if not (mine := by_task.get((task, record.impl))) or not all(r.outcome == "passed" for r in mine)]
        if missing:
            chapters = sorted({chapter_of(task) for task in missing})
            _fail(record, f"the capstone counts once chapters {', '.join(CAPSTONE_NEEDS)} pass in the same grade "
                          f"(its engine runs their functions); not passed here: chapter {', '.join(chapters)}")


def _fail(record: Outcome, why: str) -> None:
    record.outcome, record.output = "failed", f"{record.task}: {why}"
