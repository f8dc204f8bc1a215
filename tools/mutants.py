"""Mutation testing of the grader: Cosmic Ray's mutation operators applied to copies of the reference
answers (`solutions/chNN_*.py`), each copy graded by the grader itself on its own chapter. A mutant
is killed when a task it can reach loses points, or when its grade runs past the time limit (a hang);
it survives when every task keeps full marks. The hand-written mutants (tests/grader_mutants.py)
each break one contract clause on purpose; these are every small change the operators can make.

    python tools/mutants.py                          # every chapter with a task; writes exercises/MUTANTS.md
    python tools/mutants.py --chapters 05,04 --limit 10

Cosmic Ray lists each place an operator applies (its `mutation_positions`) and writes one mutated
source (`cosmic_ray.mutating.mutate_code`); this tool copies `solutions/` into a temporary folder
outside the repository per mutant and grades many of them in one pytest run
(`--impl m1@chNN,m2@chNN,...`, world size 2, no quiz), reading each one's points per task from
results.json. At world size 2 only: a mistake that only 4 ranks show survives here (the hand-written
mutants cover the one clause that needs them). Two kinds of place are left out, since no grade could
ever see them: type annotations (every solution file has `from __future__ import annotations`, so
they are never evaluated) and a mutation that writes the source unchanged. A run of every chapter
takes about an hour on 2 cores; `--limit` grades a sample.

A mutant belongs to the tasks whose functions reach the line it changes: the function the exercise
stub marks with `raise NotImplementedError("<task id>")`, and the helpers and constants it names.
The report has a table per chapter (mutants, killed, survived, score) and every survivor with
file:line and its change; a verdict written after a survivor ("equivalent: <reason>") is kept
when the report is written again. Chapters not run this time keep their section as it was.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

from cosmic_ray.ast import ast_nodes, get_ast
from cosmic_ray.mutating import mutate_code
from cosmic_ray.plugins import get_operator, operator_names

ROOT = Path(__file__).resolve().parents[1]
REPORT = ROOT / "exercises" / "MUTANTS.md"
OPEN = "open: not yet killed"
BASE_TIMEOUT_S = 120  # one grading run: pytest, the sandbox's start, and the chapter's tests once
PER_MUTANT_TIMEOUT_S = 60  # each mutant in a run: its tests, and two rank timeouts should it hang
RANK_TIMEOUT_S = 8  # the grader's --rank-timeout: a hanging mutant costs this long per strike
TASK_ROW = re.compile(r"^\| `[^|]+ \| (\d+) \| (\d+) \| \d+ \| \d+% \|$", re.MULTILINE)
SURVIVOR = re.compile(r"^- `(?P<where>[^`]+)` (?P<change>.+?) — (?P<verdict>.+)$")


class Mutant(NamedTuple):
    chapter: str
    file: str  # under solutions/
    operator: str  # a Cosmic Ray operator, e.g. core/NumberReplacer
    occurrence: int  # which of the operator's places in the file
    line: int
    change: str  # `before` → `after`: the changed line, stripped
    tasks: tuple[str, ...]  # the tasks whose code reaches the changed line
    source: str  # the whole mutated file


class Outcome(NamedTuple):
    mutant: Mutant
    killed: bool
    why: str  # the tasks that lost points, or "hang" / the grader's exit status


def task_functions(stub: Path) -> dict[str, str]:
    """function name -> task id, from the stub file's `raise NotImplementedError("<task id>")`."""
    tasks = {}
    for node in ast.parse(stub.read_text()).body:
        if isinstance(node, ast.FunctionDef):
            for raised in ast.walk(node):
                if (isinstance(raised, ast.Raise) and isinstance(raised.exc, ast.Call)
                        and getattr(raised.exc.func, "id", "") == "NotImplementedError"):
                    tasks[node.name] = raised.exc.args[0].value
    return tasks


def _defined_names(statement: ast.stmt) -> list[str]:
    if isinstance(statement, (ast.FunctionDef, ast.ClassDef)):
        return [statement.name]
    if isinstance(statement, (ast.Assign, ast.AnnAssign)):
        targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
        return [name.id for target in targets for name in ast.walk(target) if isinstance(name, ast.Name)]
    return []


def owners(tree: ast.Module, tasks: dict[str, str]) -> dict[int, tuple[str, ...]]:
    """Top-level statement index -> the tasks whose function reaches it (through the helpers and
    constants it names); a statement no task reaches (an import) belongs to every task of the file."""
    defined = {name: index for index, statement in enumerate(tree.body) for name in _defined_names(statement)}
    uses = {index: {node.id for node in ast.walk(statement) if isinstance(node, ast.Name) and node.id in defined}
            for index, statement in enumerate(tree.body)}
    reached: dict[int, set[str]] = {index: set() for index in range(len(tree.body))}
    for function, task in tasks.items():
        todo, seen = [defined[function]], set()
        while todo:
            index = todo.pop()
            if index not in seen:
                seen.add(index)
                reached[index].add(task)
                todo.extend(defined[name] for name in uses[index])
    every = tuple(sorted(set(tasks.values())))
    return {index: tuple(sorted(found)) or every for index, found in reached.items()}


def annotation_spans(tree: ast.Module) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """(start, end) of every type annotation (of an argument, a return, a variable), as (line, column)."""
    annotations = [getattr(node, field, None) for node in ast.walk(tree) for field in ("annotation", "returns")]
    return [((a.lineno, a.col_offset), (a.end_lineno, a.end_col_offset)) for a in annotations if a is not None]


def _change(source: str, mutated: str) -> str:
    """`the line before` → `the line after`, stripped (lines joined by " / " if several changed)."""
    diff = list(difflib.ndiff(source.splitlines(), mutated.splitlines()))
    removed = [line[2:].strip() for line in diff if line.startswith("- ")]
    added = [line[2:].strip() for line in diff if line.startswith("+ ")]
    return f"`{' / '.join(removed)}` → `{' / '.join(added) or '(deleted)'}`"


def chapter_mutants(chapter: str) -> list[Mutant]:
    """Every mutant of solutions/chNN_*.py that Cosmic Ray's operators make, in file order."""
    solution = next((ROOT / "solutions").glob(f"ch{chapter}_*.py"))
    source = solution.read_text()
    tree = ast.parse(source)
    tasks = task_functions(ROOT / "exercises" / solution.name)
    belongs = owners(tree, tasks)
    annotations = annotation_spans(tree)
    module = get_ast(source)
    mutants = []
    for name in operator_names():
        operator_class = get_operator(name)
        if operator_class.arguments():  # VariableReplacer / VariableInserter need a configuration
            continue
        operator = operator_class()
        positions = (start for node in ast_nodes(module) for start, _ in operator.mutation_positions(node))
        for occurrence, start in enumerate(positions):
            if any(first <= start < last for first, last in annotations):
                continue
            mutated = mutate_code(source, operator, occurrence)
            if mutated is None or mutated == source:
                continue
            statement = next(i for i, s in enumerate(tree.body) if s.lineno <= start[0] <= s.end_lineno)
            mutants.append(Mutant(chapter, solution.name, name, occurrence, start[0], _change(source, mutated),
                                  belongs[statement], mutated))
    return sorted(mutants, key=lambda m: (m.line, m.operator, m.occurrence))


def sample(mutants: list[Mutant], limit: int | None) -> list[Mutant]:
    """`limit` mutants spread evenly over the file (all of them without a limit)."""
    if limit is None or limit >= len(mutants):
        return mutants
    return [mutants[i * len(mutants) // limit] for i in range(limit)]


def _stop(process: subprocess.Popen) -> None:
    """Interrupt the grader (so that it stops its sandbox) and kill it if it is still there 15 s later."""
    os.killpg(process.pid, signal.SIGINT)
    try:
        process.wait(15)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def _run(command: list[str], timeout_s: float) -> int | None:
    """Run the grader in a session of its own; its exit status, or None when it ran past `timeout_s`.
    Interrupting this tool (Ctrl-C, or SIGTERM) stops the grader first."""
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    try:
        return process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        _stop(process)
        return None
    except KeyboardInterrupt:
        _stop(process)
        raise


def _points_lost(tests: list[dict], impl: str) -> list[str] | None:
    """The tasks that lost points in `impl`'s tests (their short names); None if none of them ran."""
    mine = [t for t in tests if t["extra_data"]["impl"] == impl]
    if not mine:
        return None
    return sorted({t["extra_data"]["task"].split("/")[1] for t in mine if t["score"] < t["max_score"]})


def grade(mutants: list[Mutant], work: Path) -> list[Outcome]:
    """Grade `mutants` (all of one chapter) in one run of the grader, beside the reference itself as
    a control; a run that dies or runs past its time limit is run again one mutant at a time, where
    that mutant is killed (a hang, or a crash of the grader)."""
    chapter = mutants[0].chapter
    folders = {}
    for mutant in mutants:
        folder = work / f"ch{chapter}-{mutant.operator.replace('/', '-')}-{mutant.occurrence}"
        shutil.copytree(ROOT / "solutions", folder, ignore=shutil.ignore_patterns("__pycache__"))
        (folder / mutant.file).write_text(mutant.source)
        folders[mutant] = str(folder.resolve())
    reference = str((ROOT / "solutions").resolve())
    results = work / "results.json"
    results.unlink(missing_ok=True)
    impls = ",".join(f"{impl}@ch{chapter}" for impl in [reference, *folders.values()])
    command = [sys.executable, "-m", "pytest", "exercises", "-q", "-p", "no:cacheprovider", "-k", "not test_quiz",
               "--impl", impls, "--world-sizes", "2", "--rank-timeout", str(RANK_TIMEOUT_S),
               "--results", str(results), "--basetemp", str(work / "tmp")]
    status = _run(command, BASE_TIMEOUT_S + PER_MUTANT_TIMEOUT_S * len(mutants))
    tests = json.loads(results.read_text())["tests"] if status is not None and results.is_file() else []
    for folder in folders.values():
        shutil.rmtree(folder)
    if tests and _points_lost(tests, reference):
        raise SystemExit(f"mutants: the reference itself lost points in ch{chapter} "
                         f"({', '.join(_points_lost(tests, reference))}); a busy machine? no score counted")
    outcomes = []
    for mutant in mutants:
        lost = _points_lost(tests, folders[mutant])
        if lost is not None:
            outcomes.append(Outcome(mutant, bool(lost), ", ".join(lost)))
        elif len(mutants) > 1:
            outcomes += grade([mutant], work)
        else:
            outcomes.append(Outcome(mutant, True, "hang" if status is None else f"no grade (grader exit {status})"))
    return outcomes


# ---- the report ------------------------------------------------------------------------------------
def _sections(text: str) -> dict[str, str]:
    """`## chNN ...` section of an earlier report -> its text."""
    parts = re.split(r"^(?=## ch\d\d )", text, flags=re.MULTILINE)
    return {part[5:7]: part for part in parts if part.startswith("## ch")}


def _verdicts(text: str) -> dict[str, str]:
    """A survivor's change (file and text, not its line) -> the verdict written after it."""
    found = {}
    for line in text.splitlines():
        match = SURVIVOR.match(line)
        if match:
            found[match["where"].split(":")[0] + " " + match["change"]] = match["verdict"]
    return found


def section(chapter: str, outcomes: list[Outcome], total: int, seconds: float, verdicts: dict[str, str]) -> str:
    file = outcomes[0].mutant.file if outcomes else next((ROOT / "solutions").glob(f"ch{chapter}_*.py")).name
    hangs = sum(o.killed and o.why.startswith(("hang", "no grade")) for o in outcomes)
    sampled = f" (a sample of {len(outcomes)} of {total})" if len(outcomes) < total else ""
    lines = [f"## ch{chapter} `solutions/{file}`", "",
             f"{len(outcomes)} mutants{sampled}, graded in {seconds:.0f} s; {hangs} killed by running past the "
             "time limit or crashing the grader.", "",
             "| task(s) | mutants | killed | survived | score |", "| --- | --- | --- | --- | --- |"]
    by_tasks: dict[tuple[str, ...], list[Outcome]] = {}
    for outcome in outcomes:
        by_tasks.setdefault(outcome.mutant.tasks, []).append(outcome)
    for tasks, group in sorted(by_tasks.items()):
        killed = sum(o.killed for o in group)
        names = " + ".join(f"`{task.split('/')[1]}`" for task in tasks)
        lines.append(f"| {names} | {len(group)} | {killed} | {len(group) - killed} | {killed / len(group):.0%} |")
    survivors = [o.mutant for o in outcomes if not o.killed]
    lines += ["", "Survivors:" if survivors else "No survivor.", ""]
    for m in sorted(survivors, key=lambda m: (m.line, m.operator, m.occurrence)):
        verdict = verdicts.get(f"{m.file} {m.operator} {m.change}", OPEN)
        lines.append(f"- `{m.file}:{m.line}` {m.operator} {m.change} — {verdict}")
    return "\n".join(lines + [""]) + "\n"


def write_report(path: Path, new_sections: dict[str, str]) -> None:
    old = path.read_text() if path.is_file() else ""
    sections = _sections(old) | new_sections
    rows = [row for text in sections.values() for row in TASK_ROW.findall(text)]
    mutants, killed = sum(int(row[0]) for row in rows), sum(int(row[1]) for row in rows)
    verdicts = [match["verdict"] for text in sections.values() for match in map(SURVIVOR.match, text.splitlines())
                if match]
    equivalent = sum(verdict.startswith("equivalent") for verdict in verdicts)
    total = (f"{mutants} mutants, {killed} killed, {mutants - killed} survived ({equivalent} equivalent, "
             f"{len(verdicts) - equivalent} open)" if mutants else "no mutant graded yet")
    head = ("# Mutation score of the grader\n\n"
            "Written by `python tools/mutants.py` (`make mutants`); its docstring says how. Each survivor is either\n"
            "`equivalent: <why no grade can tell it from the reference>` or `open: not yet killed` (a case the\n"
            "grader's tests should add). Write the verdict after the dash; the next run keeps it. Graded at world\n"
            "size 2; a chapter graded on a sample says so.\n\n"
            f"All chapters below: {total}.\n\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(head + "".join(sections[chapter] for chapter in sorted(sections)))


def chapters_with_tasks() -> list[str]:
    return [p.name[2:4] for p in sorted((ROOT / "solutions").glob("ch[0-9][0-9]_*.py"))
            if task_functions(ROOT / "exercises" / p.name)]


def grade_chapters(chapters: list[str], limit: int | None, batch: int, report: Path) -> None:
    """Grade each chapter's mutants (a sample of `limit`, if given), `batch` to a run of the grader,
    and write its section of `report` as soon as it is done."""
    verdicts = _verdicts(report.read_text()) if report.is_file() else {}
    new_sections = {}
    with tempfile.TemporaryDirectory(prefix="minisgl-mutants-") as work:
        for chapter in chapters:
            start = time.monotonic()
            every = chapter_mutants(chapter)
            chosen = sample(every, limit)
            outcomes = []
            for first in range(0, len(chosen), batch):
                outcomes += grade(chosen[first:first + batch], Path(work))
                print(f"ch{chapter}: {len(outcomes)} / {len(chosen)} graded, "
                      f"{sum(not o.killed for o in outcomes)} survived", flush=True)
            new_sections[chapter] = section(chapter, outcomes, len(every), time.monotonic() - start, verdicts)
            write_report(report, new_sections)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chapters", help="comma-separated, e.g. 05,04 (default: every chapter with a task)")
    parser.add_argument("--limit", type=int, help="grade at most N mutants per chapter, spread over the file")
    parser.add_argument("--batch", type=int, default=16, help="mutants per run of the grader (default 16)")
    parser.add_argument("--report", type=Path, default=REPORT, help=f"default {REPORT.relative_to(ROOT)}")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # a stopped run cleans up as after Ctrl-C
    known = chapters_with_tasks()
    chapters = args.chapters.split(",") if args.chapters else known
    unknown = [c for c in chapters if c not in known]
    if unknown:
        parser.error(f"no task in chapter {unknown[0]!r}; chapters with tasks: {', '.join(known)}")
    if (args.limit is not None and args.limit < 1) or args.batch < 1:
        parser.error("--limit and --batch take a number of mutants, at least 1")
    try:
        grade_chapters(chapters, args.limit, args.batch, args.report)
    except KeyboardInterrupt:
        print("mutants: interrupted; the chapters graded before are in the report", file=sys.stderr)
        return 130
    print(f"wrote {args.report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
