"""Red team: a submission that cheats in every way the course knows of (tests/redteam/), graded
through the autograder bundle exactly as Gradescope runs it (`run_autograder`, results.json). Each
cheat earns nothing for the task it attacks, honest work in the same submission earns full marks,
the grade is a valid results.json that nothing rewrites afterwards, no message shows a key or a
hidden test, and nothing the submission started outlives the grade.

With root and an interpreter an unprivileged user can run, the bundle runs learner code as
`nobody`, and the checks that need that user (the real engine and the keys unreadable, the results
folder unwritable) run too; elsewhere those few checks skip with the reason, and the rest - what the
process boundary alone must stop - still run. One bundle run for all the cheats (world size 2), and one
more for round 2 (tests/redteam/round2/: what the privileged side touches), on the test files it attacks.
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
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The autograder bundle, built once for both rounds."""
    return release_tool.build_autograder(tmp_path_factory.mktemp("bundle") / "autograder.zip")


def _run_bundle(bundle: Path, work: Path, submission: Path, pytest_args: str) -> dict:
    """Grade `submission` through the bundle's run_autograder as Gradescope runs it (as `nobody` where
    this is root and that user can run the interpreter)."""
    no_user = sandbox_user_problem(sys.executable)
    root = work / "autograder"
    with zipfile.ZipFile(bundle) as archive:
        archive.extractall(root / "source")
    (root / "source" / "run_autograder").chmod(0o755)
    shutil.move(str(submission), root / "submission")
    env = {**os.environ, "AUTOGRADER_ROOT": str(root), "AUTOGRADER_PYTHON": sys.executable,
           "AUTOGRADER_PYTEST_ARGS": pytest_args, "AUTOGRADER_SANDBOX_USER": "" if no_user else USER}
    env.pop("PYTHONPATH", None)
    started = time.monotonic()
    done = subprocess.run(["bash", str(root / "source" / "run_autograder")], capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S, env=env, cwd=work)
    results_path = root / "results" / "results.json"
    return {"returncode": done.returncode, "output": done.stdout + done.stderr, "no_user": no_user,
            "first": results_path.read_text() if results_path.is_file() else None, "results_path": results_path,
            "seconds": time.monotonic() - started}


@pytest.fixture(scope="module")
def graded(bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    work = tmp_path_factory.mktemp("redteam")
    mark = _marks_folder("redteam-marks-")
    run = _run_bundle(bundle, work, _submission(work, mark), "--world-sizes 2 --rank-timeout 8")
    # a daemon that survived the grade would rewrite it (it looks every 0.5 s): read the grade again
    # once every daemon the submission started is gone, or after a generous wait for them to go
    deadline = time.monotonic() + 60
    while _live_daemons(mark) and time.monotonic() < deadline:
        time.sleep(0.1)
    results_path = run.pop("results_path")
    yield run | {"later": results_path.read_text() if results_path.is_file() else None, "mark": mark}
    shutil.rmtree(mark, ignore_errors=True)


def _marks_folder(prefix: str) -> Path:
    """A folder the cheats leave notes in, whatever user they run as."""
    mark = Path(tempfile.mkdtemp(prefix=prefix))
    mark.chmod(0o777)
    return mark


def _messages(run: dict) -> str:
    """Everything a grade showed: each test's output in results.json and what the run printed."""
    return "\n".join(t["output"] for t in json.loads(run["first"])["tests"]) + run["output"]


def _key_lines() -> set[str]:
    """The answer lines of every quiz key (`Qn = ...`)."""
    return {line.strip() for path in quiz.KEYS_DIR.glob("ch*.py") for line in path.read_text().splitlines()
            if re.match(r"Q\d+ = ", line)}


def _assert_full_marks(run: dict, task: str) -> None:
    score, top = _scores(run)[task]
    assert score == top == task_points(task) > 0, f"{task}: {score} of {top}"


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
    _assert_full_marks(graded, task)


@pytest.mark.timeout(RUN_TIMEOUT_S + 120)
def test_nothing_the_submission_started_outlives_the_grade(graded):
    alive = _live_daemons(graded["mark"])
    assert not alive, f"daemons started by the submission still run: {alive}"


@pytest.mark.timeout(RUN_TIMEOUT_S + 120)
def test_no_message_shows_a_key_or_a_hidden_test(graded):
    outputs = _messages(graded)
    public = "\n".join(path.read_text() for path in (REPO / "exercises" / "tests").glob("test_*.py"))
    hidden = [line.strip() for path in (REPO / "exercises" / "tests" / "hidden").glob("*.py")
              for line in path.read_text().splitlines() if len(line.strip()) >= 25 and line.strip() not in public]
    assert not [line for line in hidden if line in outputs]
    assert not [line for line in _key_lines() if line in outputs]


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


# ---- round 2: what the privileged side touches (issue 41, kinds 1 and 2) -----------------------------
# A second submission, graded in one more bundle run on the few test files its cheats attack: files
# that are links, FIFOs or devices in the submission; links planted in the sandbox's scratch folders;
# a launcher that starts nothing and writes the evidence and pid files a grader might trust.
ROUND2 = REDTEAM / "round2"
ROUND2_FILES = ("test_ch00_getting_started.py", "test_ch01_tp_first_principles.py", "test_ch02_launch.py",
                "test_ch11_kv_memory.py", "test_ch12_beyond_one_machine.py", "test_quizzes.py")
# task -> (the cheat, what stops it)
CHEATS_2: dict[str, tuple[str, str]] = {
    "01-tp-first-principles/column-forward": ("the task file is a link to answers outside the submission",
                                              "submission files are opened without following links"),
    "01-tp-first-principles/row-forward": ("(the same linked file)", "submission files are opened without following links"),
    "02-launch/start-ranks": ("starts nothing: reads the scenario from its target, writes the evidence files, and "
                              "pid files naming the grader and pid 1", "roles told over the grader's socket; "
                              "ranks known from the kernel; kills only the sandbox's own descendants"),
    "11-kv-memory/match": ("its log swapped for a link to a key file, then the process ends",
                           "the grader reads no log"),
    "11-kv-memory/evict": ("links planted where the next progress files go", "progress files made O_EXCL, the grader's own"),
    "12-beyond-one-machine/node-layout": ("the zygote's log swapped for a link, the zygote killed",
                                          "each zygote log made O_EXCL in a folder of the grader's own"),
}
HONEST_2 = ("00-getting-started/rank-sum", "12-beyond-one-machine/dp-dispatch")
REFUSED_2 = ("ch01_tp_first_principles.py", "ch05_vocab_parallelism.py", "ch06_rank0_broadcast.py", "quizzes/ch02.py")


def _submission_2(work: Path, mark: Path, keys: Path) -> Path:
    """Honest chapter 00 and 12 (dp-dispatch); chapter 01 a link to honest answers outside the upload;
    quizzes/ a link to the keys; chapter 05 a FIFO, chapter 06 a link to /dev/zero; the cheats of
    round2/ appended to the reference answers of chapters 02, 11 and 12."""
    out = work / "submission" / "exercises"
    out.mkdir(parents=True)
    header = f"MARK = {str(mark)!r}\nKEYS = {str(keys / 'ch02.py')!r}\n{(REDTEAM / 'common.py').read_text()}\n"
    for override in sorted(ROUND2.glob("ch*.py")):
        text = (REPO / "solutions" / override.name).read_text()
        (out / override.name).write_text(f"{text}\n\n# ---- red team, round 2 ----\n{header}{override.read_text()}")
    shutil.copy(REPO / "solutions" / "ch00_getting_started.py", out)
    elsewhere = mark / "ch01_tp_first_principles.py"
    shutil.copy(REPO / "solutions" / elsewhere.name, elsewhere)
    (out / elsewhere.name).symlink_to(elsewhere)
    (out / "quizzes").symlink_to(keys, target_is_directory=True)
    os.mkfifo(out / "ch05_vocab_parallelism.py")
    (out / "ch06_rank0_broadcast.py").symlink_to("/dev/zero")
    return out.parent


@pytest.fixture(scope="module")
def graded_2(bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    work = tmp_path_factory.mktemp("redteam2")
    mark = _marks_folder("redteam2-marks-")
    (mark / "progress-target").write_text("untouched")  # root's, readable by all
    keys = work / "autograder" / "source" / "solutions" / "quizzes"
    ignore = " ".join(f"--ignore=exercises/tests/{p.name}" for p in (REPO / "exercises" / "tests").glob("test_*.py")
                      if p.name not in ROUND2_FILES)
    run = _run_bundle(bundle, work, _submission_2(work, mark, keys),
                      f"--world-sizes 2 --rank-timeout 8 --ignore=exercises/tests/hidden {ignore}")
    yield run | {"mark": mark}
    shutil.rmtree(mark, ignore_errors=True)


@pytest.mark.timeout(RUN_TIMEOUT_S + 120)
def test_round2_the_grade_is_written_and_refusals_are_said(graded_2):
    assert graded_2["returncode"] == 0 and graded_2["first"], graded_2["output"][-3000:]
    refused = [line for line in graded_2["output"].splitlines() if line.startswith("refused")]
    for name in REFUSED_2:
        assert [line for line in refused if f"{name}: " in line], f"{name} was not refused: {refused}"


@pytest.mark.timeout(RUN_TIMEOUT_S + 120)
@pytest.mark.parametrize("task", sorted(CHEATS_2))
def test_a_round2_cheat_earns_nothing(graded_2, task):
    cheat, stopped_by = CHEATS_2[task]
    score, top = _scores(graded_2)[task]
    assert top == task_points(task) and score == 0, f"{task}: {cheat} earned {score} of {top} ({stopped_by} failed)"


@pytest.mark.timeout(RUN_TIMEOUT_S + 120)
def test_round2_linked_keys_score_no_quiz(graded_2):
    quizzes = [t for t in json.loads(graded_2["first"])["tests"] if t["extra_data"]["task"].endswith("/quiz")]
    assert quizzes and not [t for t in quizzes if t["score"]], "a quiz scored through a link to the keys"


@pytest.mark.timeout(RUN_TIMEOUT_S + 120)
@pytest.mark.parametrize("task", HONEST_2)
def test_round2_honest_work_earns_full_marks(graded_2, task):
    _assert_full_marks(graded_2, task)


@pytest.mark.timeout(RUN_TIMEOUT_S + 120)
def test_round2_no_message_shows_a_key(graded_2):
    outputs = _messages(graded_2)
    assert not [line for line in _key_lines() if line in outputs]


@pytest.mark.timeout(RUN_TIMEOUT_S + 120)
def test_round2_no_link_planted_in_scratch_was_followed(graded_2):
    target = graded_2["mark"] / "progress-target"
    assert target.read_text() == "untouched" and target.stat().st_uid == os.getuid(), "a progress link was followed"
    assert not (graded_2["mark"] / "zygote-made").exists(), "the zygote's log was opened through a planted link"
