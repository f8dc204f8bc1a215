"""The grader's mutation tool (tools/mutants.py) on chapter 03's one small task: Cosmic Ray's mutants
of the reference are found and owned by the task, a wrong one is killed by the grader and an
equivalent one survives, a grade that runs past its time limit counts as a kill (a hang), and the
report lists survivors with file:line, keeping the verdicts written after them. About 20 s: two
short grader runs and two that are cut off. `make mutants` runs the tool over every chapter."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from file_modules import load_file_module

REPO = Path(__file__).resolve().parents[1]
mutants = load_file_module(REPO / "tools" / "mutants.py", "grader_mutation_tool")


def _pick(operator: str, before: str) -> "mutants.Mutant":
    return next(m for m in mutants.chapter_mutants("03") if m.operator == operator and before in m.change)


def test_mutants_are_found_and_owned_by_the_task():
    found = mutants.chapter_mutants("03")
    assert len(found) >= 10
    assert {m.tasks for m in found} == {("03-communication-init/unique-id",)}
    assert all(m.file == "ch03_communication_init.py" and m.source for m in found)
    assert len(mutants.sample(found, 2)) == 2


@pytest.mark.timeout(180)
def test_a_wrong_mutant_is_killed_and_an_equivalent_one_survives(tmp_path: Path):
    wrong = _pick("core/ReplaceComparisonOperator_Eq_NotEq", "== 0")  # rank 1 makes the id: caught
    same = _pick("core/ReplaceComparisonOperator_Eq_LtE", "== 0")  # a rank is never negative
    outcomes = {o.mutant: o for o in mutants.grade([wrong, same], tmp_path)}
    assert outcomes[wrong].killed and outcomes[wrong].why == "unique-id"
    assert not outcomes[same].killed
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("ch03-")], "a mutant's copy was left behind"

    report = tmp_path / "MUTANTS.md"
    key = f"{same.file} {same.operator} {same.change}"
    text = mutants.section("03", list(outcomes.values()), 12, 1.0, {key: "equivalent: a rank is never negative"})
    mutants.write_report(report, {"03": text})
    written = report.read_text()
    assert f"- `ch03_communication_init.py:{same.line}` {same.operator} `" in written
    assert written.count("equivalent: a rank is never negative") == 1
    assert "| `unique-id` | 2 | 1 | 1 | 50% |" in written and "2 mutants, 1 killed, 1 survived (1 equivalent, 0 open)" in written
    assert mutants._verdicts(written) == {key: "equivalent: a rank is never negative"}


@pytest.mark.timeout(120)
def test_a_grade_past_its_time_limit_is_a_kill(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(mutants, "BASE_TIMEOUT_S", 2)  # the grader cannot even start in 2 s: it "hangs"
    monkeypatch.setattr(mutants, "PER_MUTANT_TIMEOUT_S", 0)
    hanging = _pick("core/ReplaceComparisonOperator_Eq_LtE", "== 0")
    [outcome] = mutants.grade([hanging], tmp_path)
    assert outcome.killed and outcome.why == "hang"


def test_a_bad_argument_is_one_line():
    done = subprocess.run([sys.executable, str(REPO / "tools" / "mutants.py"), "--chapters", "08"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].endswith("no task in chapter '08'; chapters with tasks: "
                                                         "00, 01, 02, 03, 04, 05, 06, 07, 09, 11, 12, 13, 14")
