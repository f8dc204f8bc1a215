"""Red team of the scoring rules (issue 41, kinds 4 to 6): submissions that pass some tests of a task
without doing it (raising only the expected errors), fake the capstone with another engine, stall
just under the rank timeout, or - graded without a second user - write the grader's modules in the
checkout (tests/redteam_scoring/README.md lists each cheat and what stops it). Each is graded
locally (`pytest exercises --impl FOLDER@chNN`) and earns nothing; results.json stays valid.

The cheats that write the checkout are graded in a copy of it, so this checkout stays untouched.
Instructor material: a student release leaves this file and tests/redteam_scoring/ out.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CHEATS = REPO / "tests" / "redteam_scoring"
RUN_TIMEOUT_S = 600
RANK_TIMEOUT_S, TASK_BUDGET_S = 4, 1  # the stalls wait 3.5 s a call, just under the rank timeout
GRADED = {  # cheat -> chapters it is graded on, in the session of this checkout
    "raise_only_pipeline": ("13",), "raise_only_dispatch": ("14",), "stall_layout": ("12",),
    "stall_pipeline": ("13",), "capstone_substitute": ("15",), "capstone_forged_calls": ("15",),
}
WRITERS = {"writes_tiny_models": "minisgl/testing/tiny_models.py", "writes_testing_init": "minisgl/testing/__init__.py"}


def _grade(root: Path, impls: str, work: Path, name: str) -> dict:
    results = work / f"{name}.json"
    command = [sys.executable, "-m", "pytest", "exercises", "-p", "no:cacheprovider", "-q", "--impl", impls,
               "--world-sizes", "2", "--rank-timeout", str(RANK_TIMEOUT_S), "--task-budget", str(TASK_BUDGET_S),
               "--results", str(results), "--basetemp", str(work / f"tmp-{name}"), "-k", "not tp2 and not tp3"]
    env = dict(os.environ, PYTHONPATH=str(root))  # this root's grader and minisgl, not an installed copy
    start = time.monotonic()
    done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    return {"output": done.stdout + done.stderr, "seconds": time.monotonic() - start,
            "results": json.loads(results.read_text()) if results.is_file() else None}


def _checkout_copy(work: Path) -> Path:
    root = work / "checkout"
    for name in ("exercises", "minisgl"):
        shutil.copytree(REPO / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("conftest.py", "pyproject.toml"):
        shutil.copy2(REPO / name, root / name)
    return root


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Future]:
    work = tmp_path_factory.mktemp("redteam-scoring")
    here = ",".join(f"{CHEATS / cheat}@ch{chapter}" for cheat, chapters in GRADED.items() for chapter in chapters)
    copy = _checkout_copy(work)
    # each writer is graded on chapter 13, where it writes, and the capstone, whose fixture imported them late
    writers = ",".join(f"{CHEATS / cheat}@ch13" for cheat in WRITERS) + f",{CHEATS / next(iter(WRITERS))}@ch15"
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {"here": pool.submit(_grade, REPO, here, work, "here"),
                   "copy": pool.submit(_grade, copy, writers, work, "copy")}
        futures["root"] = Future()
        futures["root"].set_result(copy)
        yield futures


def _tests(run: dict, cheat: str) -> list[dict]:
    assert run["results"] is not None, f"no results.json:\n{run['output'][-3000:]}"
    mine = [t for t in run["results"]["tests"] if t["extra_data"]["impl"] == str(CHEATS / cheat)]
    assert mine, f"no graded test ran cheat {cheat}"
    return mine


def _assert_nothing_earned(run: dict, cheat: str) -> list[dict]:
    tests = _tests(run, cheat)
    earned = [(t["name"], t["score"]) for t in tests if t["score"]]
    assert not earned, f"cheat {cheat} earned points: {earned}"
    return tests


@pytest.mark.parametrize("cheat", ["raise_only_pipeline", "raise_only_dispatch"])
def test_raising_only_the_expected_errors_earns_nothing(runs, cheat):
    tests = _assert_nothing_earned(runs["here"].result(), cheat)
    waiting = [t for t in tests if "error cases count once the task's value cases pass" in t["output"]]
    assert waiting, f"{cheat}: no error case says why it does not count"


@pytest.mark.parametrize(("cheat", "stopped_by"), [
    ("capstone_substitute", "the engine never called your"),
    ("capstone_forged_calls", "the capstone counts once chapters 01, 04, 05 pass"),
])
def test_a_substitute_engine_earns_no_capstone(runs, cheat, stopped_by):
    tests = _assert_nothing_earned(runs["here"].result(), cheat)
    assert any(stopped_by in t["output"] for t in tests), [t["output"][:300] for t in tests]


@pytest.mark.parametrize("cheat", ["stall_layout", "stall_pipeline"])
def test_stalling_under_the_rank_timeout_ends_at_the_task_budget(runs, cheat):
    run = runs["here"].result()
    tests = _assert_nothing_earned(run, cheat)
    for task in {t["extra_data"]["task"] for t in tests if not t["extra_data"]["task"].endswith("/quiz")}:
        unrun = [t for t in tests if t["extra_data"]["task"] == task and "time budget" in t["output"]]
        assert unrun, f"{cheat}: every test of {task} ran, each waiting just under the rank timeout"
    # every stalled task stops within its budget plus one job; the rest of this grade is quick
    stall_tests = sum(len(_tests(run, cheat)) for cheat in ("stall_layout", "stall_pipeline"))
    assert run["seconds"] < 120 + stall_tests * TASK_BUDGET_S + 4 * (RANK_TIMEOUT_S + 2), run["seconds"]


@pytest.mark.parametrize("cheat", list(WRITERS))
def test_writing_the_checkout_without_a_second_user_changes_nothing(runs, cheat):
    run = runs["copy"].result()
    _assert_nothing_earned(run, cheat)
    assert run["results"]["score"] == 0, run["results"]["output"]
    written = (runs["root"].result() / WRITERS[cheat]).read_text()
    assert "_report.Record.score" in written, f"{cheat} did not manage to write {WRITERS[cheat]} (no test then)"


def _function_level_imports(path: Path) -> set[str]:
    """The absolute modules `path` imports inside a function (relative ones are the grader's own)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for inner in ast.walk(node):
                if isinstance(inner, ast.Import):
                    found.update(alias.name for alias in inner.names)
                elif isinstance(inner, ast.ImportFrom) and inner.level == 0 and inner.module:
                    found.add(inner.module)
    return found


def test_the_grader_imports_up_front_what_it_imports_later():
    """preload.py names every module the grader's process (grader/, not its child/, the conftests,
    the tests) imports inside a function, so none is first read after learner code has run."""
    from exercises.grader.preload import CAPSTONE_LATER, LATER

    files = [p for p in (REPO / "exercises" / "grader").glob("*.py")]
    files += [REPO / "exercises" / "conftest.py", REPO / "conftest.py", *(REPO / "exercises" / "tests").rglob("*.py")]
    later = set().union(*(_function_level_imports(path) for path in files))
    missing = sorted(name for name in later - set(LATER) - set(CAPSTONE_LATER) if name.split(".")[0] != "exercises")
    assert not missing, f"imported inside a function but not preloaded: {missing} (add them to preload.py)"
