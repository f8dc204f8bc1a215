"""Self-test of the course grader (exercises/): the untouched stubs grade as "not attempted" without
a crash, the reference solutions get full marks, and every mutant of the solutions (grader_mutants.py)
is caught by the test it names.

Three `pytest exercises` runs in subprocesses, started together: stubs, solutions, and all mutants in
one session (`--impl a@ch01,b@ch05,...`: each mutant graded on its own chapter). World size 2 only;
`make test` grades the solutions at 2 and 4.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from grader_mutants import MUTANTS, Mutant

REPO = Path(__file__).resolve().parents[1]
RUN_TIMEOUT_S = 540


def _make_mutant(root: Path, mutant: Mutant) -> Path:
    package = root / mutant.name
    shutil.copytree(REPO / "solutions", package, ignore=shutil.ignore_patterns("__pycache__"))
    path = package / mutant.file
    source = path.read_text()
    for old, new in mutant.patches:
        assert source.count(old) == 1, f"mutant {mutant.name}: {old!r} is not exactly once in solutions/{mutant.file}"
        source = source.replace(old, new)
    path.write_text(source)
    return package.resolve()


def _grade(impl: str, work: Path, name: str) -> dict:
    results = work / f"{name}.json"
    command = [sys.executable, "-m", "pytest", "exercises", "-p", "no:cacheprovider", "-q", "--impl", impl,
               "--world-sizes", "2", "--rank-timeout", "8", "--results", str(results),
               "--basetemp", str(work / f"tmp-{name}")]
    start = time.monotonic()
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    return {
        "returncode": done.returncode,
        "output": done.stdout + done.stderr,
        "results": json.loads(results.read_text()) if results.is_file() else None,
        "seconds": time.monotonic() - start,
    }


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Future]:
    work = tmp_path_factory.mktemp("grader-selftest")
    mutants = {m.name: _make_mutant(work / "mutants", m) for m in MUTANTS}
    all_mutants = ",".join(f"{path}@ch{m.chapter}" for m, path in zip(MUTANTS, mutants.values()))
    pool = ThreadPoolExecutor(max_workers=3)
    futures = {
        "mutants": pool.submit(_grade, all_mutants, work, "mutants"),
        "solutions": pool.submit(_grade, "solutions", work, "solutions"),
        "stubs": pool.submit(_grade, "exercises", work, "stubs"),
    }
    futures["paths"] = Future()
    futures["paths"].set_result(mutants)
    yield futures
    pool.shutdown(wait=True)


def _outcomes(run: dict) -> list[dict]:
    assert run["results"] is not None, f"no results.json; exit {run['returncode']}:\n{run['output'][-3000:]}"
    return [test["extra_data"] | {"output": test["output"]} for test in run["results"]["tests"]]


def _stubs_edited() -> bool:
    """True when the exercise files differ from the last commit (someone is doing the exercises)."""
    try:
        diff = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", "exercises"], cwd=REPO, capture_output=True)
    except OSError:
        return False
    return diff.returncode == 1


@pytest.mark.timeout(RUN_TIMEOUT_S + 60)
def test_stubs_are_not_attempted(runs):
    if _stubs_edited():
        pytest.skip("exercises/ has edits: the stub check runs on a pristine checkout (CI)")
    run = runs["stubs"].result()
    outcomes = _outcomes(run)
    assert run["returncode"] == 1, f"expected exit 1 (tests failed), got {run['returncode']}:\n{run['output'][-3000:]}"
    assert len(outcomes) > 100
    attempted = [o["nodeid"] for o in outcomes if o["outcome"] != "not_attempted"]
    assert not attempted, f"stubs should all be 'not attempted': {attempted[:5]}"
    for noise in ("Traceback", "INTERNALERROR", "hung"):
        assert noise not in run["output"], f"{noise!r} in the stub run's output:\n{run['output'][-3000:]}"
    assert run["results"]["score"] == 0


@pytest.mark.timeout(RUN_TIMEOUT_S + 60)
def test_solutions_pass(runs):
    run = runs["solutions"].result()
    failed = [(o["nodeid"], o["output"][:500]) for o in _outcomes(run) if o["outcome"] != "passed"]
    assert not failed, f"solutions failed: {failed[:3]}"
    assert run["returncode"] == 0, run["output"][-3000:]
    assert run["results"]["score"] == run["results"]["extra_data"]["max_score"] > 0


@pytest.mark.timeout(RUN_TIMEOUT_S + 60)
@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_mutant_is_caught(runs, mutant: Mutant):
    run = runs["mutants"].result()
    assert "INTERNALERROR" not in run["output"], run["output"][-3000:]
    path = str(runs["paths"].result()[mutant.name])
    mine = [o for o in _outcomes(run) if o["impl"] == path]
    assert mine, f"no graded test ran mutant {mutant.name}"
    assert not [o for o in mine if o["outcome"] == "not_attempted"], "a mutant must not read as not attempted"
    caught = [o for o in mine if f"::{mutant.caught_by}[" in o["nodeid"] + "[" and o["outcome"] in ("failed", "error")]
    assert caught, f"{mutant.caught_by} did not catch {mutant.name} ({mutant.mistake})"


def test_a_wrong_tensor_is_reported_per_rank(runs):
    """The row-parallel mutant's failure says which rank, how far off, and where it starts."""
    path = str(runs["paths"].result()["row-no-all-reduce"])
    run = runs["mutants"].result()
    output = next(o["output"] for o in _outcomes(run) if o["impl"] == path and "test_row_forward" in o["nodeid"])
    for part in ("rank 0:", "rank 1:", "max abs error", "first bad index"):
        assert part in output, f"{part!r} missing from:\n{output}"


def test_readme_lists_the_grader_points():
    """exercises/README.md's tables say what the grader awards."""
    from exercises.grader.chapters import TASK_POINTS
    from exercises.grader.quiz_keys import QUIZZES

    readme = (REPO / "exercises" / "README.md").read_text()
    for task, points in TASK_POINTS.items():
        row = re.search(rf"\| `{re.escape(task)}` \|[^|]*\| (\d+) \|", readme)
        assert row and int(row.group(1)) == points, f"README: {task} should be worth {points}"
    for chapter, questions in QUIZZES.items():
        row = re.search(rf"\| `quizzes/ch{chapter}.py`[^|]*\| (\d+) \| (\d+) \|", readme)
        expected = (len(questions), sum(q.points for q in questions))
        assert row and (int(row.group(1)), int(row.group(2))) == expected, f"README: quiz ch{chapter} is {expected}"
