"""Red team: a submission that cheats in every way the course knows of (tests/redteam/), graded
through the autograder bundle exactly as Gradescope runs it (`run_autograder`, results.json). Each
cheat earns nothing for the task it attacks, honest work in the same submission earns full marks,
the grade is a valid results.json that nothing rewrites afterwards, no message shows a key or a
hidden test, and nothing the submission started outlives the grade.

With root and an interpreter an unprivileged user can run, the bundle runs learner code as
`nobody`, and the checks that need that user (the real engine and the keys unreadable, the results
folder unwritable) run too; elsewhere those few checks skip with the reason, and the rest - what the
process boundary alone must stop - still run. One bundle run for all the cheats (world size 2).
Instructor material: a student release leaves this file and tests/redteam/ out.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections import defaultdict
from pathlib import Path

import psutil
import pytest

from exercises.grader import quiz
from exercises.grader.chapters import CHAPTERS, task_points
from file_modules import load_file_module
from sandbox_user import USER, sandbox_user_problem

REPO = Path(__file__).resolve().parents[1]
REDTEAM = REPO / "tests" / "redteam"
RUN_TIMEOUT_S = 600

release_tool = load_file_module(REPO / "tools" / "release.py", "course_release_redteam")

# task -> (the cheat, what stops it, whether only the sandbox user stops it)
CHEATS: dict[str, tuple[str, str, bool]] = {
    "00-getting-started/rank-sum": ("rewrites results.json (ancestors' --results, an exit hook)",
                                    "the grader writes the grade last, alone", False),
    "01-tp-first-principles/row-forward": ("the engine's forward, aliased at import", "redacted copy", False),
    "02-launch/start-ranks": ("patches the grader's report module", "no grader module in the worker", False),
    "03-communication-init/unique-id": ("patches torch.distributed's rank queries", "expected ids computed outside",
                                        False),
    "04-weight-sharding/qkv-gqa": ("a second copy of the engine module from its file", "redacted copy", False),
    "04-weight-sharding/shard-rules": ("importlib.reload of the engine module", "redacted copy", False),
    "04-weight-sharding/shard-then-merge": ("exec of the real engine's source from the course folders",
                                            "the sandbox user cannot read them", True),
    "05-vocab-parallelism/vocab-embedding": ("clears the off-limits table, calls the engine", "redacted copy", False),
    "05-vocab-parallelism/lm-head": ("reads the full weight from the caller's frames", "a rank gets its shard only",
                                     False),
    "06-rank0-broadcast/receive-step": ("prints fake PASS lines", "printed output is never read", False),
    "07-tp-decoder-layer/tp-mlp": ("os._exit(0) mid-call", "a dead worker is a failed job", False),
    "07-tp-decoder-layer/local-shapes": ("sys.exit(0) mid-call", "SystemExit is a failed job", False),
    "09-communication-volume/comm-volume": ("patches math.isclose, round, torch.equal", "comparisons made outside",
                                            False),
    "11-kv-memory/match": ("sleeps past every limit", "killed at the time limit; two hangs end the task", False),
    "11-kv-memory/evict": ("a copy of the engine's code object", "redacted copy", False),
    "12-beyond-one-machine/node-layout": ("a daemon that rewrites the grade later", "subreaper kill before writing",
                                          False),
    "12-beyond-one-machine/dp-dispatch": ("a fork bomb (20 children a call)", "process cap, killed with the pool",
                                          False),
    "13-pipeline-parallelism/stage-split": ("writes the chapter 13 key and report.py", "read before learner code runs",
                                            False),
    "13-pipeline-parallelism/stage-weights": ("hunts argv / environment for paths, writes there",
                                              "clean environment; the grade written last", False),
    "14-experts-across-ranks/dispatch-plan": ("sys.exit(0) at import", "an import is part of a job", False),
    "15-capstone/serve": ("goes around the learner's steps to the engine's LM head", "cut out of its copy", False),
}
HONEST = ("01-tp-first-principles/column-forward", "08-process-structures/quiz")


def _wrong_answers(chapter: str) -> tuple[str, str]:
    """(a quiz file answering every question of `chapter` wrongly, a key file with those answers)."""
    keys_path = quiz.KEYS_DIR / f"ch{chapter}.py"
    text = keys_path.read_text()
    for question in quiz.questions(chapter):
        key = quiz.keys(chapter)[question.id]
        if question.kind == "number":
            wrong: object = key * 3 + 7
        elif question.kind == "choice":
            wrong = next(letter for letter in question.letters if letter != key)
        elif question.kind == "multi":
            wrong = "".join(sorted(set(question.letters[:2]) ^ set(key))) or question.letters[0]
        else:
            wrong = key[::-1]
        text = re.sub(rf"^{question.id} = .*$", f"{question.id} = {wrong!r}", text, flags=re.MULTILINE)
    return text, text


def _submission(work: Path, mark: Path) -> Path:
    """The cheating submission: each reference answer with its chapter's override appended."""
    out = work / "submission" / "exercises"
    (out / "quizzes").mkdir(parents=True)
    common = (REDTEAM / "common.py").read_text()
    answers_13, keys_13 = _wrong_answers("13")
    for solution in sorted((REPO / "solutions").glob("ch*.py")):
        text = solution.read_text()
        override = REDTEAM / "overrides" / solution.name
        if override.is_file():
            cheat = override.read_text().replace('"{wrong_keys_13}"', repr(keys_13))
            text += f"\n\n# ---- red team ----\nMARK = {str(mark)!r}\n{common}\n{cheat}"
        (out / solution.name).write_text(text)
    for chapter in quiz.quiz_chapters():
        target = out / "quizzes" / f"ch{chapter}.py"
        cheat = REDTEAM / "quizzes" / f"ch{chapter}.py"
        if cheat.is_file():
            shutil.copy(cheat, target)
        elif chapter == "13":
            target.write_text(answers_13)
        else:
            shutil.copy(quiz.KEYS_DIR / f"ch{chapter}.py", target)  # honest: the control
    return out.parent


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory) -> dict:
    work = tmp_path_factory.mktemp("redteam")
    mark = Path(tempfile.mkdtemp(prefix="redteam-marks-"))
    mark.chmod(0o777)  # the cheats leave notes here, whatever user they run as
    no_user = sandbox_user_problem(sys.executable)
    root = work / "autograder"
    with zipfile.ZipFile(release_tool.build_autograder(work / "autograder.zip")) as archive:
        archive.extractall(root / "source")
    (root / "source" / "run_autograder").chmod(0o755)
    submission = _submission(work, mark)
    shutil.move(str(submission), root / "submission")
    env = {**os.environ, "AUTOGRADER_ROOT": str(root), "AUTOGRADER_PYTHON": sys.executable,
           "AUTOGRADER_PYTEST_ARGS": "--world-sizes 2 --rank-timeout 8",
           "AUTOGRADER_SANDBOX_USER": "" if no_user else USER}
    env.pop("PYTHONPATH", None)
    started = time.monotonic()
    done = subprocess.run(["bash", str(root / "source" / "run_autograder")], capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S, env=env, cwd=work)
    results_path = root / "results" / "results.json"
    first = results_path.read_text() if results_path.is_file() else None
    # a daemon that survived the grade would rewrite it (it looks every 0.5 s): read the grade again
    # once every daemon the submission started is gone, or after a generous wait for them to go
    deadline = time.monotonic() + 60
    while _live_daemons(mark) and time.monotonic() < deadline:
        time.sleep(0.1)
    yield {"returncode": done.returncode, "output": done.stdout + done.stderr, "first": first,
           "later": results_path.read_text() if results_path.is_file() else None, "mark": mark, "no_user": no_user,
           "seconds": time.monotonic() - started}
    shutil.rmtree(mark, ignore_errors=True)


def _live_daemons(mark: Path) -> list[int]:
    """The daemons the submission started (each wrote its pid into the marks folder) that still run."""
    alive = []
    for pid in (int(path.read_text()) for path in mark.glob("daemon-*")):
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.NoSuchProcess:
            pass
    return alive


def _scores(graded: dict) -> dict[str, tuple[float, float]]:
    assert graded["first"], f"no results.json; exit {graded['returncode']}:\n{graded['output'][-3000:]}"
    totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for test in json.loads(graded["first"])["tests"]:
        totals[test["extra_data"]["task"]][0] += test["score"]
        totals[test["extra_data"]["task"]][1] += test["max_score"]
    return {task: (round(score, 4), round(top, 4)) for task, (score, top) in totals.items()}


@pytest.mark.timeout(RUN_TIMEOUT_S + 120)
def test_the_grade_is_a_valid_results_file_nothing_rewrites(graded):
    assert graded["returncode"] == 0, graded["output"][-3000:]
    results = json.loads(graded["first"])
    assert {"score", "tests", "output"} <= set(results) and len(results["tests"]) > 100
    assert graded["later"] == graded["first"], "results.json changed after the grader finished"
    assert not (graded["mark"] / "rewrote-results").exists(), (graded["mark"] / "rewrote-results").read_text()


@pytest.mark.timeout(RUN_TIMEOUT_S + 120)
@pytest.mark.parametrize("task", sorted(CHEATS))
def test_a_cheat_earns_nothing(graded, task):
    cheat, stopped_by, needs_user = CHEATS[task]
    if needs_user and graded["no_user"]:
        pytest.skip(f"{cheat} is stopped by the sandbox user alone: {graded['no_user']}")
    score, top = _scores(graded)[task]
    assert top == task_points(task) and score == 0, f"{task}: {cheat} earned {score} of {top} ({stopped_by} failed)"


@pytest.mark.timeout(RUN_TIMEOUT_S + 120)
def test_every_cheating_quiz_scores_zero_and_says_why(graded):
    results = json.loads(graded["first"])
    for chapter in quiz.quiz_chapters():
        task = f"{CHAPTERS[chapter]}/quiz"
        if task in HONEST:
            continue
        tests = [t for t in results["tests"] if t["extra_data"]["task"] == task]
        assert tests and sum(t["score"] for t in tests) == 0, f"quiz {chapter} scored"
        if (REDTEAM / "quizzes" / f"ch{chapter}.py").is_file():
            assert all("scores 0" in t["output"] for t in tests), tests[0]["output"]


@pytest.mark.timeout(RUN_TIMEOUT_S + 120)
@pytest.mark.parametrize("task", HONEST)
def test_honest_work_beside_the_cheats_earns_full_marks(graded, task):
    score, top = _scores(graded)[task]
    assert score == top == task_points(task) > 0, f"{task}: {score} of {top}"


@pytest.mark.timeout(RUN_TIMEOUT_S + 120)
def test_nothing_the_submission_started_outlives_the_grade(graded):
    alive = _live_daemons(graded["mark"])
    assert not alive, f"daemons started by the submission still run: {alive}"


@pytest.mark.timeout(RUN_TIMEOUT_S + 120)
def test_no_message_shows_a_key_or_a_hidden_test(graded):
    outputs = "\n".join(t["output"] for t in json.loads(graded["first"])["tests"]) + graded["output"]
    public = "\n".join(path.read_text() for path in (REPO / "exercises" / "tests").glob("test_*.py"))
    hidden = [line.strip() for path in (REPO / "exercises" / "tests" / "hidden").glob("*.py")
              for line in path.read_text().splitlines() if len(line.strip()) >= 25 and line.strip() not in public]
    assert not [line for line in hidden if line in outputs]
    keys = {line.strip() for path in quiz.KEYS_DIR.glob("ch*.py") for line in path.read_text().splitlines()
            if re.match(r"Q\d+ = ", line)}
    assert not [line for line in keys if line in outputs]


@pytest.mark.timeout(RUN_TIMEOUT_S + 120)
def test_the_sandbox_user_cannot_touch_the_course_or_the_grade(graded):
    if graded["no_user"]:
        pytest.skip(f"no sandbox user: {graded['no_user']}")
    assert not (graded["mark"] / "wrote-grader-tree").exists(), (graded["mark"] / "wrote-grader-tree").read_text()
    found = json.loads((graded["mark"] / "found-paths").read_text())
    assert "AUTOGRADER_ROOT" not in found and "PYTHONPATH" not in found, found


def test_the_red_team_covers_enough_distinct_cheats():
    quizzes = list((REDTEAM / "quizzes").glob("ch*.py"))
    assert len(CHEATS) + len(quizzes) >= 15 + 15
    assert len({cheat for cheat, _, _ in CHEATS.values()}) == len(CHEATS)
