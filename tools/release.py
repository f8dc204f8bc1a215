"""Build what a class runs on from this repository (the instructor's): a student release and a
Gradescope autograder bundle. docs/instructors.md tells the whole routine.

    python tools/release.py student build/student-release [--tarball]
    python tools/release.py autograder build/autograder.zip

The student release is every tracked file of the course (engine, chapters, docs, exercises with
their stubs, the grader and its public tests) minus the instructor material: `solutions/` (code
answers and quiz keys), the hidden tests, the grader's self-test, mutants and red-team suite, and
these tools; its README and Makefile lose what speaks of them (RELEASE_EDITS). It refuses to
build while an exercise file is not a stub or a quiz answer is filled in, so a solved working copy
can never leak. The bundle is the release plus the quiz keys, the hidden tests, and Gradescope's
`setup.sh` and `run_autograder` at its root.

Uses only the standard library and git (it never imports minisgl).
"""

from __future__ import annotations

import argparse
import ast
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
INSTRUCTOR_ONLY = (  # paths (files or folders) a student release leaves out
    "solutions",
    "exercises/tests/hidden",
    "tests/grader_mutants.py",
    "tests/test_grader.py",
    "tests/test_release.py",
    "tests/test_quiz_design.py",
    "tests/test_redteam.py",
    "tests/test_mutants.py",
    "exercises/MUTANTS.md",
    "tests/redteam",
    "tools",
)
BUNDLE_EXTRAS = ("solutions/quizzes", "exercises/tests/hidden")  # what the autograder adds back
GRADESCOPE_SCRIPTS = ("tools/autograder/setup.sh", "tools/autograder/run_autograder")
# What a release says differently: it has no answers to grade and no tools to build releases with.
# (file, text in the instructor's copy, text in the release); each must match exactly once.
RELEASE_EDITS = (
    ("Makefile", "run the tests, the grader on solutions/, the notebooks, the site build",
     "run the tests, the notebooks, the site build"),
    ("README.md", " `solutions/` — the answers and\n  quiz keys (instructor material: `make student-release` "
     "and `make autograder` build what a class\n  runs on without them, see [Running a class]"
     "(docs/instructors.md)).", ""),
    ("README.md", "engine tests, the grader on solutions/, every notebook", "engine tests, every notebook"),
    ("README.md", ";\nthe reference answers: `pytest exercises/ --impl solutions`.", "."),
)
RELEASE_BLOCK = ("# >>> instructor-only", "# <<< instructor-only")  # whole lines a release drops (Makefile)
INSTRUCTOR_WORDS = ("solutions/", "tools/", "--impl solutions")  # a release's README and Makefile never say these


class ReleaseError(Exception):
    """Why a release cannot be built, in one line."""


def tracked_files(root: Path = ROOT) -> list[Path]:
    try:
        listing = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True, text=True)
    except (OSError, subprocess.CalledProcessError):
        raise ReleaseError(f"{root} is not a git checkout; build releases from the course's repository") from None
    return [Path(name) for name in listing.stdout.split("\0") if name and (root / name).is_file()]


def _under(path: Path, prefixes: tuple[str, ...]) -> bool:
    return any(path == Path(p) or Path(p) in path.parents for p in prefixes)


def check_stubs(root: Path = ROOT) -> None:
    """Every task function body only raises NotImplementedError, and every quiz answer is None."""
    exercises = root / "exercises"
    for path in sorted(exercises.glob("ch[0-9][0-9]_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef):
                body = [s for s in node.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
                raises = len(body) == 1 and isinstance(body[0], ast.Raise)
                stub = raises and "NotImplementedError" in ast.unparse(body[0])
                if not stub:
                    raise ReleaseError(f"{path.relative_to(root)}: {node.name}() is not a stub; build from a clean "
                                       "checkout (git stash) so that no answer ships")
    for path in sorted(exercises.glob("quizzes/ch[0-9][0-9].py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign) and not (isinstance(node.value, ast.Constant) and node.value.value is None):
                raise ReleaseError(f"{path.relative_to(root)}: {ast.unparse(node.targets[0])} is answered; build from "
                                   "a clean checkout so that no answer ships")


def _copy(files: list[Path], out: Path, root: Path) -> None:
    for relative in files:
        target = out / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / relative, target)


def _drop_blocks(text: str) -> str:
    start, end = RELEASE_BLOCK
    kept, dropping = [], False
    for line in text.splitlines(keepends=True):
        if line.startswith(start):
            dropping = True
        elif line.startswith(end):
            dropping = False
        elif not dropping:
            kept.append(line)
    return "".join(kept)


def edit_release_texts(out: Path) -> None:
    """Apply RELEASE_EDITS and drop RELEASE_BLOCK lines in the release's copies; then no README or
    Makefile line may still speak of the instructor's material."""
    texts = {name: _drop_blocks((out / name).read_text()) for name in {name for name, _, _ in RELEASE_EDITS}}
    for name, old, new in RELEASE_EDITS:
        if texts[name].count(old) != 1:
            raise ReleaseError(f"{name} no longer holds {old.strip()[:60]!r} once; update RELEASE_EDITS in "
                               "tools/release.py")
        texts[name] = texts[name].replace(old, new)
    for name, text in texts.items():
        left = [word for word in INSTRUCTOR_WORDS if word in text]
        if left:
            raise ReleaseError(f"{name} still mentions {left[0]} for a release; add an edit to RELEASE_EDITS in "
                               "tools/release.py (or wrap Makefile lines in RELEASE_BLOCK markers)")
        (out / name).write_text(text)


def build_student(out: Path, root: Path = ROOT) -> Path:
    """The student release in `out` (which must not exist yet)."""
    check_stubs(root)
    if out.exists():
        raise ReleaseError(f"{out} exists; remove it or choose another folder")
    _copy([f for f in tracked_files(root) if not _under(f, INSTRUCTOR_ONLY)], out, root)
    edit_release_texts(out)
    return out


def build_autograder(zip_path: Path, root: Path = ROOT) -> Path:
    """The Gradescope bundle: a zip whose root holds setup.sh, run_autograder and the course."""
    staging = zip_path.with_suffix(".staging")
    shutil.rmtree(staging, ignore_errors=True)
    build_student(staging, root)
    _copy([f for f in tracked_files(root) if _under(f, BUNDLE_EXTRAS)], staging, root)
    for script in GRADESCOPE_SCRIPTS:
        shutil.copy2(root / script, staging / Path(script).name)
    zip_path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(zip_path, "w", zipfile.ZIP_DEFLATED) as bundle:
        for path in sorted(p for p in staging.rglob("*") if p.is_file()):
            info = zipfile.ZipInfo.from_file(path, path.relative_to(staging).as_posix())
            info.compress_type = zipfile.ZIP_DEFLATED
            bundle.writestr(info, path.read_bytes())  # keeps the scripts' executable bits
    shutil.rmtree(staging)
    return zip_path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["student", "autograder"])
    parser.add_argument("out", type=Path, help="a new folder (student) or a .zip path (autograder)")
    parser.add_argument("--tarball", action="store_true", help="student: also write OUT.tar.gz")
    args = parser.parse_args()
    try:
        if args.what == "student":
            out = build_student(args.out)
            if args.tarball:
                with tarfile.open(f"{out}.tar.gz", "w:gz") as tar:
                    tar.add(out, arcname=out.name)
        else:
            out = build_autograder(args.out)
    except ReleaseError as error:
        print(f"release: {error}", file=sys.stderr)
        return 1
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
