"""The grade report: classifies every graded test (passed, wrong, not attempted, or submitted: a
quiz answer where no key is at hand), shortens every failure to its message (a hidden test's
source never shows), splits each task's points exactly over its tests, writes a Gradescope-style
`results.json` once every sandboxed process is gone, and prints a per-chapter score table. Before
it writes, the rules of scoring.py fail the passed tests whose points wait on others."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import pytest

from . import sandbox, scoring
from .chapters import CHAPTERS, chapter_of, task_points
from .outcomes import ImplementationError, LearnerRaised, NotAttempted, Submitted, WrongAnswer

PLACES = 4  # decimals of a test's share; a task's shares still add up to its points exactly

OUTPUT_LIMIT = 4000  # characters of failure text kept per test in results.json


@dataclass
class Record:
    nodeid: str
    task: str
    points: float
    impl: str = ""  # the resolved --impl spec this test graded
    outcome: str = "failed"  # passed | failed | not_attempted | submitted | error | skipped
    output: str = ""
    error_case: bool = False  # marked `error_case`: scores once the task's value cases pass (scoring.py)

    @property
    def chapter(self) -> str:
        return chapter_of(self.task)

    @property
    def score(self) -> float:
        return self.points if self.outcome == "passed" else 0.0


class GradeReport:
    """A pytest plugin; exercises/conftest.py registers one per run."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.records: dict[str, Record] = {}
        self.points: dict[str, float] = {}  # nodeid -> this test's share of its task's points

    def assign_points(self, items: list[pytest.Item]) -> None:
        """Split each task's points over its tests by weight, per graded implementation.

        Called on every collected test before `-k` / `-m` deselect any, so selecting a few tests
        shows their own share (a quiz question: its own points), never the whole task's."""
        weights: dict[tuple[str, str], dict[str, float]] = {}
        for item in items:
            marker = item.get_closest_marker("task")
            if marker is not None:
                group = weights.setdefault((marker.args[0], _impl_of(item)), {})
                group[item.nodeid] = float(marker.kwargs.get("weight", 1))
        for (task, _), tests in weights.items():
            self.points.update(split_points(task_points(task), tests))

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        outcome = yield
        marker = item.get_closest_marker("task")
        if marker is None:
            return
        report = outcome.get_result()
        record = self.records.get(item.nodeid)
        if record is None:
            impl = _impl_of(item) or getattr(item, "funcargs", {}).get("impl", "")
            points = self.points.get(item.nodeid, 0.0)
            record = self.records[item.nodeid] = Record(item.nodeid, marker.args[0], points, impl,
                                                        error_case=item.get_closest_marker("error_case") is not None)
        if record.outcome in ("not_attempted", "submitted", "error") and report.when == "teardown":
            return  # keep the first reason
        if report.passed and report.when == "call":
            record.outcome = "passed"
        elif report.skipped:
            record.outcome, record.output = "skipped", str(report.longrepr)[:OUTPUT_LIMIT]
        elif report.failed:
            record.outcome, record.output = self._classify(report, call, record.task, "/hidden/" in item.nodeid)

    @staticmethod
    def _classify(report: pytest.TestReport, call: pytest.CallInfo, task: str, hidden: bool) -> tuple[str, str]:
        error = call.excinfo.value if call.excinfo is not None else None
        if isinstance(error, (NotImplementedError, NotAttempted)):
            detail = error if isinstance(error, NotAttempted) else "still raises NotImplementedError"
            report.longrepr = f"NOT ATTEMPTED: {task}: {detail}"
            return "not_attempted", report.longrepr
        if isinstance(error, Submitted):
            report.longrepr = f"SUBMITTED: {task}: {error}"
            return "submitted", report.longrepr
        if isinstance(error, (WrongAnswer, ImplementationError)):
            report.longrepr = f"{task}: {error}"[:OUTPUT_LIMIT]  # the grader's message says it all; no traceback
            return "failed", report.longrepr
        outcome = "failed" if report.when == "call" else "error"
        if isinstance(error, LearnerRaised):  # your code raised where the test expected a value
            report.longrepr = f"{task}: your code raised {error.details()}"[:OUTPUT_LIMIT]
        elif hidden:  # a hidden test's own failure: its type only, never its source or values
            report.longrepr = f"{task}: a hidden test could not run ({type(error).__name__}); tell your instructor"
        else:
            return outcome, str(report.longrepr)[-OUTPUT_LIMIT:]
        return outcome, report.longrepr

    def chapter_rows(self) -> list[tuple[str, int, int, int, int, float, float]]:
        """(chapter slug, passed, wrong, not attempted, submitted, score, max score) per chapter graded."""
        rows = []
        for number, slug in CHAPTERS.items():
            records = [r for r in self.records.values() if r.chapter == number and r.outcome != "skipped"]
            if records:
                count = lambda *names: sum(r.outcome in names for r in records)  # noqa: E731
                rows.append((slug, count("passed"), count("failed", "error"), count("not_attempted"),
                             count("submitted"), exact_sum(r.score for r in records),
                             exact_sum(r.points for r in records)))
        return rows

    def table(self) -> str:
        rows = self.chapter_rows()
        submitted = any(row[4] for row in rows)  # a student release: quiz answers wait for the autograder
        extra = f"{'submitted':>11}" if submitted else ""
        lines = [f"{'chapter':<26}{'passed':>7}{'wrong':>7}{'not attempted':>15}{extra}{'points':>15}"]
        for slug, passed, wrong, todo, sent, score, total in rows:
            extra = f"{sent:>11}" if submitted else ""
            lines.append(f"{slug:<26}{passed:>7}{wrong:>7}{todo:>15}{extra}{f'{score:.4g} / {total:.4g}':>15}")
        score, total = exact_sum(row[5] for row in rows), exact_sum(row[6] for row in rows)
        lines.append(f"{'total':<{66 if submitted else 55}}{f'{score:.4g} / {total:.4g}':>15}")
        if submitted:
            lines.append("submitted: quiz answers recorded here; the course's autograder grades them")
        return "\n".join(lines)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        sandbox.shutdown()  # every process that ran learner code is gone before the grade is written
        if not self.records:
            return
        scoring.settle(self.records.values())
        tests = [
            {
                "name": f"{r.task}: {r.nodeid.split('::', 1)[-1]}",
                "score": r.score,
                "max_score": r.points,
                "status": "passed" if r.outcome == "passed" else "failed",  # submitted: 0 until the autograder
                "output": r.output,
                "tags": [f"ch{r.chapter}", r.task],
                "extra_data": {"nodeid": r.nodeid, "task": r.task, "outcome": r.outcome, "impl": r.impl},
            }
            for r in self.records.values()
            if r.outcome != "skipped"
        ]
        results = {
            "score": exact_sum(t["score"] for t in tests),
            "output": self.table(),
            "visibility": "visible",
            "stdout_visibility": "visible",
            "extra_data": {"max_score": exact_sum(t["max_score"] for t in tests),
                           "impl": self.config.getoption("--impl")},
            "tests": tests,
        }
        write_atomically(Path(self.config.getoption("--results")), json.dumps(results, indent=1))

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not self.records:
            return
        impl = self.config.getoption("--impl")
        terminalreporter.write_sep("=", f"minisgl course grade (--impl {impl})")
        terminalreporter.write_line(self.table())
        terminalreporter.write_line(f"results: {Path(self.config.getoption('--results')).resolve()}")


def split_points(total: float, weights: dict[str, float]) -> dict[str, float]:
    """Each test's share of a task's `total` points, by weight, in PLACES decimals that add up to
    `total` exactly: shares are rounded down, and the units left over go to the largest remainders."""
    unit = Fraction(1, 10**PLACES)
    exact = {key: Fraction(total) * Fraction(w) / sum(map(Fraction, weights.values())) for key, w in weights.items()}
    shares = {key: (value // unit) * unit for key, value in exact.items()}
    left = int((Fraction(total) - sum(shares.values())) / unit)
    for key in sorted(exact, key=lambda k: exact[k] - shares[k], reverse=True)[:left]:
        shares[key] += unit
    return {key: float(value) for key, value in shares.items()}


def exact_sum(values) -> float:
    """A sum of PLACES-decimal scores without float drift (352, never 351.9986 or 352.00000000000006)."""
    return float(sum((Decimal(repr(v)) for v in values), Decimal(0)))


def write_atomically(path: Path, text: str) -> None:
    """Write `text` to `path` through a new file renamed over it: a reader sees the old file or the
    new one, and a link put where the file goes is replaced, never followed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, scratch = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(handle, "w") as f:
        f.write(text)
    os.chmod(scratch, 0o644)
    os.replace(scratch, path)


def _impl_of(item: pytest.Item) -> str:
    """The --impl spec a test is parametrized with ("" when only one is graded)."""
    callspec = getattr(item, "callspec", None)
    return callspec.params.get("impl", "") if callspec else ""
