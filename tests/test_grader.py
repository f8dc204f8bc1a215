"""Self-test of the course grader (exercises/): every mutant of the reference solutions
(grader_mutants.py) is caught by the test it names, and the grader's own defects stay fixed. (The
reference solutions get full marks at world sizes 2 and 4, and the untouched stubs grade as "not
attempted" without a crash, in test_release.py: through the autograder bundle, which holds this
grader, its hidden tests and the quiz keys.)

`pytest exercises` runs in subprocesses, all started together when the first test needs one: the
mutants in sessions of a few chapters each (`--impl a@ch01,b@ch05,...`: each mutant graded on its
chapter, `-k` keeping only the tests a mutant names; world size 2, and 4 for the one clause it
takes), and two short runs of the grader's options. Most of a mutant session waits for a mistake to
time out, so its chapters are split where the long waits are (MUTANT_SESSIONS). Unit checks of the
sandbox's pieces (the redaction, the data a worker may send, quiz files read as data, exact shares)
run in this process; the red team (test_redteam.py) attacks the whole through the bundle.
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
RUN_TIMEOUT_S = 900


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


# The chapters of each session of world-size-2 mutants. A session spends most of its time waiting
# for mutants that hang or miss a deadline (chapter 02's dead rank alone waits 30 s), so the
# sessions run side by side; every chapter with a mutant must be in one (test_every_mutant_is_graded).
MUTANT_SESSIONS = (("00", "01", "02"), ("03", "04", "05", "06", "07", "09", "11", "12", "13", "14", "15", "16"))


def _grade(impl: str, work: Path, name: str, *args: str, world_sizes: str = "2") -> dict:
    results = work / f"{name}.json"
    command = [sys.executable, "-m", "pytest", "exercises", "-p", "no:cacheprovider", "-q", "--impl", impl,
               "--world-sizes", world_sizes, "--rank-timeout", "8", "--results", str(results),
               "--basetemp", str(work / f"tmp-{name}"), *args]
    start = time.monotonic()
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    return {
        "returncode": done.returncode,
        "output": done.stdout + done.stderr,
        "results": json.loads(results.read_text()) if results.is_file() else None,
        "seconds": time.monotonic() - start,
    }


def _mutant_run(mutants: list[Mutant], paths: dict[str, Path], work: Path, name: str, world_size: int) -> dict:
    impls = ",".join(f"{paths[m.name]}@ch{m.chapter}" for m in mutants)
    keep = " or ".join(f"({m.name} and {m.caught_by})" for m in mutants)
    return _grade(impls, work, name, "-k", keep, world_sizes=str(world_size))


def _session_of(mutant: Mutant) -> str:
    if mutant.world_size != 2:
        return f"mutants-ws{mutant.world_size}"
    return next(f"mutants-ch{'-'.join(chapters)}" for chapters in MUTANT_SESSIONS if mutant.chapter in chapters)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Future]:
    work = tmp_path_factory.mktemp("grader-selftest")
    paths = {m.name: _make_mutant(work / "mutants", m) for m in MUTANTS}
    sessions: dict[str, list[Mutant]] = {}
    for mutant in MUTANTS:
        sessions.setdefault(_session_of(mutant), []).append(mutant)
    pool = ThreadPoolExecutor(max_workers=len(sessions) + 2)
    futures = {name: pool.submit(_mutant_run, mutants, paths, work, name, mutants[0].world_size)
               for name, mutants in sessions.items()}
    futures["one-question"] = pool.submit(_grade, "solutions", work, "one-question", "-k", "ch05-Q3")
    futures["collect"] = pool.submit(_collect, "solutions@ch07,solutions@ch09")
    futures["paths"] = Future()
    futures["paths"].set_result(paths)
    yield futures
    pool.shutdown(wait=True)


def _collect(impl: str) -> str:
    command = [sys.executable, "-m", "pytest", "exercises", "--collect-only", "-q", "-p", "no:cacheprovider",
               "--impl", impl]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300).stdout


def _outcomes(run: dict) -> list[dict]:
    assert run["results"] is not None, f"no results.json; exit {run['returncode']}:\n{run['output'][-3000:]}"
    return [test["extra_data"] | {"output": test["output"]} for test in run["results"]["tests"]]


def _mutant_outcomes(runs: dict, name: str) -> list[dict]:
    mutant = next(m for m in MUTANTS if m.name == name)
    run = runs[_session_of(mutant)].result()
    assert "INTERNALERROR" not in run["output"], run["output"][-3000:]
    path = str(runs["paths"].result()[name])
    return [o for o in _outcomes(run) if o["impl"] == path]


def _has_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.timeout(RUN_TIMEOUT_S + 60)
@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_mutant_is_caught(runs, mutant: Mutant):
    if mutant.needs_gpu and not _has_gpu():
        pytest.skip(f"{mutant.name}: a device clause, shown only where a rank gets a GPU (pytest tests/test_grader.py "
                    "on a GPU machine)")
    mine = _mutant_outcomes(runs, mutant.name)
    assert mine, f"no graded test ran mutant {mutant.name}"
    assert not [o for o in mine if o["outcome"] == "not_attempted"], "a mutant must not read as not attempted"
    caught = [o for o in mine if f"::{mutant.caught_by}[" in o["nodeid"] + "[" and o["outcome"] in ("failed", "error")]
    assert caught, f"{mutant.caught_by} did not catch {mutant.name} ({mutant.mistake})"


def test_there_are_enough_distinct_mutants():
    names = [m.name for m in MUTANTS]
    assert len(names) >= 40
    assert not [(a, b) for a in names for b in names if a != b and a in b], "a mutant name is part of another"


def test_every_mutant_is_graded_in_one_session():
    chapters = [chapter for session in MUTANT_SESSIONS for chapter in session]
    assert len(chapters) == len(set(chapters)), "a chapter in two mutant sessions"
    assert not {m.chapter for m in MUTANTS if m.world_size == 2} - set(chapters), "add the chapter to MUTANT_SESSIONS"


def test_a_wrong_tensor_is_reported_per_rank(runs):
    """The row-parallel mutant's failure says which rank, how far off, and where it starts."""
    outcomes = _mutant_outcomes(runs, "row-no-all-reduce")
    output = next(o["output"] for o in outcomes if "test_row_forward[" in o["nodeid"])
    for part in ("rank 0:", "rank 1:", "max abs error", "first bad index"):
        assert part in output, f"{part!r} missing from:\n{output}"


def test_a_hang_names_the_rank_that_never_joined(runs):
    """Rank 0 skips an empty step's broadcast: the report names it, not only the rank left waiting."""
    output = next(o["output"] for o in _mutant_outcomes(runs, "empty-step-skipped") if o["outcome"] == "failed")
    stuck = r"rank 1 did not finish .* waits in its collective #\d+ \(torch\.distributed\.broadcast\)"
    assert re.search(stuck, output), output
    assert "rank 0 returned after" in output and "never joined" in output, output
    assert "_receive_job" not in output, "the report leaks the grader's internal job name"


def test_the_engine_shortcut_is_named(runs):
    output = next(o["output"] for o in _mutant_outcomes(runs, "row-engine-layer") if o["outcome"] == "failed")
    assert "minisgl.layers.linear.RowParallelLinear.forward" in output and "off limits" in output, output


def test_the_copy_hint_asks_for_a_copy(runs):
    output = next(o["output"] for o in _mutant_outcomes(runs, "column-shard-is-a-view") if o["outcome"] == "failed")
    assert ".clone()" in output and ".contiguous()" not in output, output


def test_a_collective_in_the_column_forward_is_graded_not_crashed(runs):
    output = next(o["output"] for o in _mutant_outcomes(runs, "column-all-reduced") if o["outcome"] == "failed")
    assert "IndexError" not in output and "ranks wrong" in output, output


@pytest.mark.timeout(RUN_TIMEOUT_S + 60)
def test_impl_chapters_add_up_per_spec(runs):
    """`--impl A@ch07,A@ch09` grades A on both chapters (it once kept only the last)."""
    collected = runs["collect"].result()
    files = {line.split("::")[0].removeprefix("exercises/tests/") for line in collected.splitlines() if "::" in line}
    assert {"test_ch07_tp_decoder_layer.py", "test_ch09_communication_volume.py"} <= files
    quizzes = {re.search(r"(ch\d\d)-Q\d+", line).group(1) for line in collected.splitlines() if "test_quiz[" in line}
    assert quizzes == {"ch07", "ch09"}, collected[-2000:]
    assert files <= {"test_ch07_tp_decoder_layer.py", "test_ch09_communication_volume.py", "test_quizzes.py",
                     "hidden/test_fresh_shapes.py"}, files


@pytest.mark.timeout(RUN_TIMEOUT_S + 60)
def test_selecting_one_question_keeps_its_own_points(runs):
    """`-k` once gave a single quiz question its whole chapter's points."""
    (test,) = runs["one-question"].result()["results"]["tests"]
    assert test["max_score"] == 1.0 and test["score"] == 1.0


def test_every_off_limits_function_exists(tmp_path):
    """When the engine moves a function, the grader must follow (or a shortcut would go unblocked):
    both copies of minisgl the sandbox makes cut every entry, or say which entry to update."""
    import minisgl
    from exercises.grader.off_limits import copy_entries
    from exercises.grader.redact import redacted_copy

    for capstone in (False, True):
        entries, plugged = copy_entries(capstone)
        out = tmp_path / str(capstone)
        out.mkdir()
        redacted_copy(Path(minisgl.__file__).resolve().parent, out, entries, plugged)
        for entry in entries:
            module, _, qualname = entry.partition(":")
            path = out.joinpath(*module.split(".")).with_suffix(".py")
            path = path if path.is_file() else path.with_suffix("") / "__init__.py"
            assert f"raise OffLimits(\"calls {module}.{qualname.removesuffix('.fget')}," in path.read_text(), entry


def test_a_redacted_function_raises_however_it_is_reached(tmp_path):
    """An alias taken before, a reload, a second copy from the file: all find the same cut code."""
    from exercises.grader.redact import RedactionError, redact_source

    source = ('"""doc"""\nfrom __future__ import annotations\n\nimport os\n\n\n'
              'class Layer:\n    def forward(self, x):\n'
              '        """keep me"""\n        ops = None\n        if ops is not None:\n            return ops(x)\n'
              '        return x * 2\n\n\ndef helper(x):\n    return x + 1\n')
    cut = redact_source(source, {"helper": "no", "Layer.forward": "no either"}, {"Layer.forward"})
    (tmp_path / "engine_copy.py").write_text(cut)
    namespace: dict = {}
    exec(compile(cut, "engine_copy.py", "exec"), namespace)
    with pytest.raises(RuntimeError, match="no"):
        namespace["helper"](1)
    with pytest.raises(RuntimeError, match="no either"):
        namespace["Layer"]().forward(1)
    assert '"""keep me"""' in cut and "return ops(x)" in cut and "return x * 2" not in cut
    with pytest.raises(RedactionError, match="plug-in branch"):
        redact_source(source, {"helper": "no"}, {"helper"})
    with pytest.raises(RedactionError, match="not a function"):
        redact_source(source, {"gone": "no"}, set())


def test_what_crosses_from_a_worker_is_checked_data():
    """A worker's reply is decoded as data: wrong shapes, sizes, tags and nesting are refused."""
    import torch

    from exercises.grader.child import wire
    from exercises.grader.sandbox import MalformedReply, check_reply

    value = {"a": (1, 2.5, None, b"\x00"), 3: [torch.arange(6, dtype=torch.bfloat16).reshape(2, 3)]}
    back = wire.decode(wire.encode(value))
    assert back.keys() == value.keys() and back["a"] == value["a"] and torch.equal(back[3][0], value[3][0])
    assert wire.type_name(wire.decode(wire.encode(object()))) == "object"
    for garbage in ({"$": "tensor", "dtype": "float32", "shape": [4], "device": "cpu", "v": "AAAA"},
                    {"$": "pickle", "v": "gASV"}, {"not": "tagged"}, {"$": "tensor", "dtype": "object", "shape": [],
                                                                       "device": "cpu", "v": ""}):
        with pytest.raises(wire.WireError):
            wire.decode(garbage)
    deep: list = []
    for _ in range(wire.MAX_DEPTH + 5):
        deep = [deep]
    with pytest.raises(wire.WireError):
        wire.decode(deep)
    for reply in ({"kind": "ok", "value": 1, "collectives": [["a", "b"]]}, {"kind": "maybe"},
                  {"kind": "error", "error": {"type": 1}}, {"kind": "ok", "value": 1, "changed": "x"}):
        with pytest.raises(MalformedReply):
            check_reply(reply)


def test_a_quiz_file_is_read_as_data(tmp_path):
    from exercises.grader import quiz

    path = tmp_path / "ch99.py"
    path.write_text('"""doc"""\n# Q1 (choice). comment\nQ1 = "b"\nQ2 = -1.5\nQ3 = None\n')
    assert quiz.answers(path) == {"Q1": "b", "Q2": -1.5, "Q3": None}
    for body, says in (("import os\nQ1 = 'a'\n", "line 1"), ("Q1 = str('a')\n", "plain value"),
                       ("Q1: str = 'a'\n", "line 1"), ("Q1 = Q2 = 'a'\n", "line 1"), ("Q1 = f'{1}'\n", "plain value"),
                       ("def Q1():\n    pass\n", "line 1"), ("Q1 = (\n", "not valid Python")):
        path = tmp_path / f"ch{abs(hash(body)) % 10**6}.py"
        path.write_text(body)
        problem = quiz.answers(path)
        assert isinstance(problem, str) and says in problem and "scores 0" in problem, (body, problem)



def test_a_quiz_file_is_read_without_following_links_and_never_raises(tmp_path):
    """What a submission can leave where its quiz file goes: a link to the keys (the file, or the
    whole quizzes/ folder), a FIFO, a device, a huge file, arithmetic too deep for the parser. Each
    is one line scoring that quiz 0; none is read through, none blocks, none raises."""
    import os

    from exercises.grader import quiz

    keys = tmp_path / "keys"
    keys.mkdir()
    (keys / "ch99.py").write_text('Q1 = "b"\n')
    cases = {}
    for name, plant in {
        "file-link": lambda q: (q / "ch99.py").symlink_to(keys / "ch99.py"),
        "fifo": lambda q: os.mkfifo(q / "ch99.py"),
        "device": lambda q: (q / "ch99.py").symlink_to("/dev/zero"),
        "huge": lambda q: (q / "ch99.py").write_text("Q1 = 'b'\n" + "#" * (quiz.MAX_QUIZ_BYTES + 1)),
        "deep-unary": lambda q: (q / "ch99.py").write_text("Q1 = " + "-" * 100_000 + "1\n"),
        "deep-sum": lambda q: (q / "ch99.py").write_text("Q1 = " + "+".join(["1"] * 200_000) + "\n"),
        "not-utf8": lambda q: (q / "ch99.py").write_bytes(b"Q1 = '\xff'\n"),
    }.items():
        folder = tmp_path / name / "quizzes"
        folder.mkdir(parents=True)
        plant(folder)
        cases[name] = quiz.answers(folder / "ch99.py")
    linked = tmp_path / "folder-link"
    linked.mkdir()
    (linked / "quizzes").symlink_to(keys)
    cases["folder-link"] = quiz.answers(linked / "quizzes" / "ch99.py")
    for name, problem in cases.items():
        assert isinstance(problem, str) and "scores 0" in problem and '"b"' not in problem, (name, problem)
    assert quiz.answers(keys / "ch99.py") == {"Q1": "b"}  # the same file, reached plainly, reads


def test_a_submission_is_taken_without_following_links(tmp_path):
    """What an upload can hold where a task or quiz file goes: a link to the keys (the file, or the
    whole quizzes/ folder), a link out of the submission, a FIFO, a device, a huge file. Each is
    refused with one line and graded as the stub; none is read through, none blocks. (The old
    collect copied through links: the keys became the student's answers.)"""
    import os

    from exercises.grader.submission import MAX_BYTES, collect

    exercises = tmp_path / "exercises"
    (exercises / "quizzes").mkdir(parents=True)
    for name in ("ch00_a.py", "ch01_b.py", "ch02_c.py", "ch03_d.py", "ch04_e.py", "quizzes/ch00.py"):
        (exercises / name).write_text("stub\n")
    keys = tmp_path / "keys"
    keys.mkdir()
    (keys / "ch00.py").write_text('Q1 = "b"\n')
    upload = tmp_path / "upload" / "exercises"
    upload.mkdir(parents=True)
    (upload / "ch00_a.py").write_text("mine\n")
    (upload / "ch01_b.py").symlink_to(keys / "ch00.py")
    os.mkfifo(upload / "ch02_c.py")
    (upload / "ch03_d.py").symlink_to("/dev/zero")
    (upload / "ch04_e.py").write_text("#" * (MAX_BYTES + 1))
    (upload / "quizzes").symlink_to(keys, target_is_directory=True)
    taken, missing, refused = collect(upload.parent, exercises)
    assert taken == ["ch00_a.py"] and missing == [] and len(refused) == 5, (taken, missing, refused)
    assert all("\n" not in line for line in refused)
    assert (exercises / "ch00_a.py").read_text() == "mine\n"
    assert [(exercises / n).read_text() for n in ("ch01_b.py", "ch02_c.py", "ch03_d.py", "ch04_e.py",
                                                   "quizzes/ch00.py")] == ["stub\n"] * 5


def test_the_sandbox_refuses_a_user_that_can_read_the_course():
    """Here the course is readable by everyone: a sandbox for another user must refuse to start,
    naming what that user can read, before any learner code runs. (The old sandbox started.)"""
    from sandbox_user import USER, sandbox_user_problem

    from exercises.grader import sandbox

    if problem := sandbox_user_problem(sys.executable):
        pytest.skip(problem)
    box = sandbox.Sandbox(sandbox.User.named(USER), 10.0)
    try:
        with pytest.raises(sandbox.SandboxError, match=f"the sandbox user {USER} can read .*solutions"):
            box.start()
    finally:
        box.close()


def test_a_task_s_shares_add_up_exactly():
    """352, never 351.9986: shares of 4 decimals that sum to the task's points."""
    from exercises.grader.report import exact_sum, split_points

    for total, count in ((10, 3), (5, 7), (13, 11), (20, 3)):
        shares = split_points(total, {str(i): 1 + i % 3 for i in range(count)})
        assert exact_sum(shares.values()) == total and all(round(v, 4) == v for v in shares.values())


def test_the_clause_table_names_every_mutant_and_its_test():
    """exercises/README.md's clause table: every mutant in exactly one row, beside the test it names."""
    readme = (REPO / "exercises" / "README.md").read_text()
    table = readme.split("## Every clause, forced", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    by_name = {m.name: m for m in MUTANTS}
    seen: list[str] = []
    for row in rows:
        names = [n for n in re.findall(r"`([\w-]+)`", row.split("|")[4]) if n in by_name]
        assert names, f"a clause without a mutant: {row}"
        for name in names:
            assert f"`{by_name[name].caught_by}`" in row, f"{name} is caught by {by_name[name].caught_by}: {row}"
        seen += names
    assert sorted(seen) == sorted(by_name), sorted(set(by_name) ^ set(seen))


def test_readme_lists_the_grader_points():
    """exercises/README.md's tables say what the grader awards."""
    from exercises.grader import quiz
    from exercises.grader.chapters import TASK_POINTS

    readme = (REPO / "exercises" / "README.md").read_text()
    for task, points in TASK_POINTS.items():
        row = re.search(rf"^\| `{re.escape(task)}` \|.*\| (\d+) \|$", readme, re.MULTILINE)
        assert row and int(row.group(1)) == points, f"README: {task} should be worth {points}"
    for chapter in quiz.quiz_chapters():
        questions = quiz.questions(chapter)
        row = re.search(rf"\| `quizzes/ch{chapter}.py`[^|]*\| (\d+) \| (\d+) \|", readme)
        expected = (len(questions), sum(q.points for q in questions))
        assert row and (int(row.group(1)), int(row.group(2))) == expected, f"README: quiz ch{chapter} is {expected}"
