"""Taking a student's submission into a clean copy of the course (the autograder bundle's
`run_autograder` calls this): only the files a student edits are copied - the task files
`chNN_*.py` and the quiz files `quizzes/chNN.py` - so nothing uploaded can replace the grader or
its tests. A submission may be the `exercises/` folder, its contents, or the files alone.

    python -m exercises.grader.submission SUBMISSION_DIR EXERCISES_DIR
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path


def editable_files(exercises: Path) -> list[Path]:
    """The files of `exercises` a student edits, relative to it."""
    tasks = sorted(p.relative_to(exercises) for p in exercises.glob("ch[0-9][0-9]_*.py"))
    quizzes = sorted(p.relative_to(exercises) for p in exercises.glob("quizzes/ch[0-9][0-9].py"))
    return tasks + quizzes


def _find(submission: Path, relative: Path) -> Path | None:
    for candidate in (submission / "exercises" / relative, submission / relative, submission / relative.name):
        if candidate.is_file():
            return candidate
    return None


def collect(submission: Path, exercises: Path) -> tuple[list[str], list[str]]:
    """Copy the submitted versions of the editable files over `exercises`; (taken, left as stubs)."""
    taken, missing = [], []
    for relative in editable_files(exercises):
        found = _find(submission, relative)
        if found is None:
            missing.append(str(relative))
            continue
        shutil.copyfile(found, exercises / relative)
        taken.append(str(relative))
    return taken, missing


def main() -> int:
    submission, exercises = Path(sys.argv[1]), Path(sys.argv[2])
    taken, missing = collect(submission, exercises)
    print(f"graded from the submission: {', '.join(taken) or 'nothing'}")
    if missing:
        print(f"not in the submission (graded as the untouched stubs): {', '.join(missing)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
