"""The student release and the autograder bundle (tools/release.py).

The release holds no answer (searched for every distinctive line of the reference solutions and
every quiz key) and its README and Makefile no longer speak of the instructor's material; its
grader runs: every task "not attempted", filled-in quiz answers "submitted", never graded against
a key. The bundle, unpacked into a simulated Gradescope layout and run with this venv's Python (as
`nobody` where that user can run it), grades the reference solutions to full marks at world sizes 2
and 4 and the stubs to zero (every test not attempted, without a crash): the grader's self-test on
the answers and on the stubs, with its hidden tests and keys. It fails loudly when it cannot grade.
Four grader runs in subprocesses, started together.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import zipfile
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from file_modules import load_file_module
from sandbox_user import USER, sandbox_user_problem

REPO = Path(__file__).resolve().parents[1]
RUN_TIMEOUT_S = 600


release_tool = load_file_module(REPO / "tools" / "release.py", "course_release")


def _texts(root: Path) -> dict[Path, str]:
    texts = {}
    for path in root.rglob("*"):
        if path.is_file():
            try:
                texts[path] = path.read_text()
            except UnicodeDecodeError:
                continue  # figures and other binaries
    return texts


def _answers() -> list[str]:
    """Lines only the reference answers contain: function bodies and quiz keys."""
    lines = set()
    for path in sorted((REPO / "solutions").glob("ch*.py")):
        source = path.read_text()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef):
                for statement in node.body[1:] if ast.get_docstring(node) else node.body:
                    for line in ast.get_source_segment(source, statement).splitlines():
                        if len(line.split("#")[0].strip()) >= 20:
                            lines.add(line.split("#")[0].strip())
    for path in sorted((REPO / "solutions" / "quizzes").glob("ch*.py")):
        lines.update(line.strip() for line in path.read_text().splitlines() if line.startswith("Q"))
    public = "\n".join(_public_texts())
    return sorted(line for line in lines if line not in public)  # a line the course itself shows is no leak


def _public_texts() -> list[str]:
    """Every text file of the repository a learner may see, read from a walk that skips the hidden
    folders (.venv alone holds tens of thousands of files)."""
    texts = []
    for folder, subfolders, names in os.walk(REPO):
        here = Path(folder)
        subfolders[:] = [name for name in subfolders if _is_public(here / name)]
        for name in names:
            if _is_public(here / name):
                try:
                    texts.append((here / name).read_text())
                except (UnicodeDecodeError, OSError):
                    continue  # figures and other binaries
    return texts


def _is_public(path: Path) -> bool:
    relative = path.relative_to(REPO)
    hidden = (".git", ".venv", "build", "site") + release_tool.INSTRUCTOR_ONLY
    return not any(relative == Path(p) or Path(p) in relative.parents for p in hidden) and \
        not any(part.startswith(".") or part == "__pycache__" for part in relative.parts)


def _grade(cwd: Path, results: Path, *args: str, env: dict | None = None) -> dict:
    command = [sys.executable, "-m", "pytest", "exercises", "-p", "no:cacheprovider", "-q", "--world-sizes", "2",
               "--rank-timeout", "8", "--results", str(results), *args]
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
                          env={**os.environ, "PYTHONPATH": str(cwd), **(env or {})})
    return {"returncode": done.returncode, "output": done.stdout + done.stderr,
            "results": json.loads(results.read_text()) if results.is_file() else None}


def _autograde(bundle: Path, work: Path, submission_from: Path, python: str = sys.executable,
               pytest_args: str = "--world-sizes 2 --rank-timeout 8") -> dict:
    """Gradescope's layout under `work`: source/ (the unzipped bundle), submission/, results/.
    `python` as the rehearsal in docs/instructors.md gives it (relative to the repository, say)."""
    root = work / "autograder"
    with zipfile.ZipFile(bundle) as archive:
        archive.extractall(root / "source")
    (root / "source" / "run_autograder").chmod(0o755)
    shutil.copytree(submission_from, root / "submission" / "exercises")
    env = {**os.environ, "AUTOGRADER_ROOT": str(root), "AUTOGRADER_PYTHON": python,
           "AUTOGRADER_PYTEST_ARGS": pytest_args,
           "AUTOGRADER_SANDBOX_USER": "" if sandbox_user_problem(sys.executable) else USER}
    env.pop("PYTHONPATH", None)  # run_autograder sets its own
    done = subprocess.run(["bash", str(root / "source" / "run_autograder")], capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S, env=env, cwd=REPO)
    results = root / "results" / "results.json"
    return {"returncode": done.returncode, "output": done.stdout + done.stderr,
            "results": json.loads(results.read_text()) if results.is_file() else None}


def _solutions_as_submission(work: Path) -> Path:
    """The reference answers in a student's layout: task files, quizzes/."""
    out = work / "submitted"
    out.mkdir()
    for path in (REPO / "solutions").glob("ch*.py"):
        shutil.copy(path, out / path.name)
    shutil.copytree(REPO / "solutions" / "quizzes", out / "quizzes")
    return out


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    work = tmp_path_factory.mktemp("release")
    return {"work": work, "release": release_tool.build_student(work / "student"),
            "bundle": release_tool.build_autograder(work / "autograder.zip")}


@pytest.fixture(scope="module")
def runs(built: dict[str, Path]) -> dict[str, Future]:
    work, release, bundle = built["work"], built["release"], built["bundle"]
    quiz_copy = work / "student-with-quiz-answers"
    shutil.copytree(release, quiz_copy)
    for path in (REPO / "solutions" / "quizzes").glob("ch*.py"):
        shutil.copy(path, quiz_copy / "exercises" / "quizzes" / path.name)
    pool = ThreadPoolExecutor(max_workers=3)
    futures = {
        "release": pool.submit(_grade, release, work / "release.json"),
        "quizzes": pool.submit(_grade, quiz_copy, work / "quizzes.json", "-k", "quiz"),
        # the reference answers at both world sizes, each job with the default time limit (no honest
        # job comes near it, however busy the machine): the grade `pytest exercises --impl solutions` gives
        "bundle-solutions": pool.submit(_autograde, bundle, work / "solutions-run", _solutions_as_submission(work),
                                        pytest_args="--world-sizes 2,4"),
        # the rehearsal of docs/instructors.md: a relative AUTOGRADER_PYTHON, run from the repository
        "bundle-stubs": pool.submit(_autograde, bundle, work / "stubs-run", release / "exercises",
                                    os.path.relpath(sys.executable, REPO)),
    }
    yield futures
    pool.shutdown(wait=True)


def _outcomes(run: dict) -> list[dict]:
    assert run["results"] is not None, f"no results.json; exit {run['returncode']}:\n{run['output'][-3000:]}"
    return [test["extra_data"] | {"output": test["output"]} for test in run["results"]["tests"]]


def test_release_leaves_out_the_instructor_material(built):
    release = built["release"]
    for path in release_tool.INSTRUCTOR_ONLY:
        assert not (release / path).exists(), f"{path} is in the student release"
    assert (release / "exercises" / "grader" / "quiz.py").is_file() and (release / "minisgl").is_dir()
    assert (release / "chapters" / "15-capstone" / "README.md").is_file()
    for name in ("README.md", "Makefile"):
        text = (release / name).read_text()
        assert not [word for word in release_tool.INSTRUCTOR_WORDS if word in text], name
    assert "student-release:" not in (release / "Makefile").read_text()


def test_release_holds_no_answer(built):
    answers = _answers()
    assert len(answers) > 60, "too few distinctive answer lines to search for"
    leaks = [(line, path.relative_to(built["release"])) for path, text in _texts(built["release"]).items()
             for line in answers if line in text]
    assert not leaks, f"answers in the student release: {leaks[:5]}"


def test_release_refuses_a_solved_checkout(tmp_path):
    (tmp_path / "exercises" / "quizzes").mkdir(parents=True)
    (tmp_path / "exercises" / "ch00_x.py").write_text('def f():\n    """doc"""\n    raise NotImplementedError("x")\n')
    (tmp_path / "exercises" / "quizzes" / "ch00.py").write_text("Q1 = None\n")
    release_tool.check_stubs(tmp_path)
    (tmp_path / "exercises" / "quizzes" / "ch00.py").write_text('Q1 = "b"\n')
    with pytest.raises(release_tool.ReleaseError, match="Q1 is answered"):
        release_tool.check_stubs(tmp_path)
    (tmp_path / "exercises" / "quizzes" / "ch00.py").write_text("Q1 = None\n")
    (tmp_path / "exercises" / "ch00_x.py").write_text("def f():\n    return 1\n")
    with pytest.raises(release_tool.ReleaseError, match="f\\(\\) is not a stub"):
        release_tool.check_stubs(tmp_path)


@pytest.mark.timeout(RUN_TIMEOUT_S + 60)
def test_grader_runs_in_the_release(runs):
    run = runs["release"].result()
    outcomes = _outcomes(run)
    assert run["returncode"] == 1, run["output"][-3000:]
    assert outcomes and all(o["outcome"] == "not_attempted" for o in outcomes), \
        [o["nodeid"] for o in outcomes if o["outcome"] != "not_attempted"][:5]
    assert not [o for o in outcomes if "/hidden/" in o["nodeid"]]
    for noise in ("Traceback", "INTERNALERROR", "hung"):
        assert noise not in run["output"], run["output"][-3000:]


@pytest.mark.timeout(RUN_TIMEOUT_S + 60)
def test_release_quiz_answers_are_submitted_never_graded(runs):
    run = runs["quizzes"].result()
    outcomes = _outcomes(run)
    assert outcomes and all(o["outcome"] == "submitted" for o in outcomes), \
        [(o["nodeid"], o["output"][:200]) for o in outcomes if o["outcome"] != "submitted"][:5]
    assert run["results"]["score"] == 0 and "is not right" not in run["output"]
    assert "the course's autograder grades them" in run["output"]


@pytest.mark.timeout(RUN_TIMEOUT_S + 60)
def test_bundle_grades_the_solutions_to_full_marks(runs):
    """The grader's self-test on the reference answers, hidden tests included, at world sizes 2 and 4."""
    run = runs["bundle-solutions"].result()
    outcomes = _outcomes(run)
    failed = [(o["nodeid"], o["output"][:300]) for o in outcomes if o["outcome"] != "passed"]
    assert not failed, failed[:3]
    assert {o["nodeid"].split("[ws")[1][0] for o in outcomes if "[ws" in o["nodeid"]} == {"2", "4"}
    assert [o for o in outcomes if "/hidden/" in o["nodeid"]], "the bundle should run the hidden tests"
    assert run["results"]["score"] == run["results"]["extra_data"]["max_score"] > 0


@pytest.mark.timeout(RUN_TIMEOUT_S + 60)
def test_bundle_grades_the_stubs_to_zero(runs):
    """The untouched stubs, hidden tests and quizzes included: every test "not attempted", and no
    crash, hang or internal error on the way (the grader's self-test on stubs)."""
    run = runs["bundle-stubs"].result()
    outcomes = _outcomes(run)
    assert run["returncode"] == 0 and len(outcomes) > 100, run["output"][-3000:]
    attempted = [o["nodeid"] for o in outcomes if o["outcome"] != "not_attempted"]
    assert not attempted, f"stubs should all be 'not attempted': {attempted[:5]}"
    assert [o for o in outcomes if "/hidden/" in o["nodeid"]], "the bundle should run the hidden tests"
    for noise in ("Traceback", "INTERNALERROR", "hung"):
        assert noise not in run["output"], f"{noise!r} in the stub run's output:\n{run['output'][-3000:]}"
    assert run["results"]["score"] == 0


@pytest.mark.timeout(RUN_TIMEOUT_S + 60)
@pytest.mark.parametrize("python,pytest_args,says", [
    ("/no/such/python", "", "no Python interpreter"),
    (sys.executable, "--no-such-option", "wrote no valid"),
], ids=["no-interpreter", "no-results"])
def test_a_bundle_that_cannot_grade_fails_loudly(built, tmp_path, python, pytest_args, says):
    """Exit 1 with the reason, never 0 without a results.json (Gradescope would show nothing)."""
    run = _autograde(built["bundle"], tmp_path, REPO / "exercises", python, pytest_args)
    assert run["returncode"] == 1 and run["results"] is None, run["output"][-2000:]
    assert says in run["output"], run["output"][-2000:]
