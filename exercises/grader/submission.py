"""Taking a student's submission into a clean copy of the course (the autograder bundle's
`run_autograder` calls this): only the files a student edits are copied - the task files
`chNN_*.py` and the quiz files `quizzes/chNN.py` - so nothing uploaded can replace the grader or
its tests. A submission may be the `exercises/` folder, its contents, or the files alone.

This runs as root before any learner code, on what a student uploaded: every file is opened from
inside the submission folder without following a link (a link could name the keys, a FIFO never
ends a read, /dev/zero never ends at all), as a regular file of at most MAX_BYTES. A file that is
not is refused with a one-line reason and graded as the untouched stub.

    python -m exercises.grader.submission SUBMISSION_DIR EXERCISES_DIR
"""

from __future__ import annotations

import errno
import os
import stat
import sys
from pathlib import Path

MAX_BYTES = 1 << 20  # a task or quiz file is a few KiB; anything this large is not one


class Refused(Exception):
    """A submitted file the grader will not take (one line saying why)."""


def editable_files(exercises: Path) -> list[Path]:
    """The files of `exercises` a student edits, relative to it."""
    tasks = sorted(p.relative_to(exercises) for p in exercises.glob("ch[0-9][0-9]_*.py"))
    quizzes = sorted(p.relative_to(exercises) for p in exercises.glob("quizzes/ch[0-9][0-9].py"))
    return tasks + quizzes


def _read_inside(submission: int, relative: Path) -> bytes | None:
    """The bytes of `relative` under the open folder `submission`, every part opened without
    following a link; None when it is not there, Refused when it is there but not a plain file."""
    *folders, name = relative.parts
    handle = os.dup(submission)
    try:
        for part in [*folders, name]:
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | (os.O_DIRECTORY if part != name else 0)
            try:
                opened = os.open(part, flags, dir_fd=handle)
            except FileNotFoundError:
                return None
            except OSError as error:
                # a link gives ELOOP, or ENOTDIR where a folder is opened (ENOTDIR also: a file there)
                if error.errno == errno.ENOTDIR and not stat.S_ISLNK(os.lstat(part, dir_fd=handle).st_mode):
                    return None
                if error.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise Refused(f"{'/'.join(relative.parts)}: a link (or a path through one); upload the "
                                  "file itself") from None
                raise Refused(f"{'/'.join(relative.parts)}: cannot be opened ({error.strerror})") from None
            os.close(handle)
            handle = opened
        info = os.fstat(handle)
        if not stat.S_ISREG(info.st_mode):
            raise Refused(f"{'/'.join(relative.parts)}: not a regular file (a FIFO, a device or a folder)")
        if info.st_size > MAX_BYTES:
            raise Refused(f"{'/'.join(relative.parts)}: {info.st_size} bytes, over the {MAX_BYTES} a file may have")
        data = os.read(handle, MAX_BYTES + 1)
        if len(data) > MAX_BYTES:
            raise Refused(f"{'/'.join(relative.parts)}: over the {MAX_BYTES} bytes a file may have")
        return data
    finally:
        os.close(handle)


def _find(submission: int, relative: Path) -> bytes | None:
    """The first of the places a file may be uploaded to that holds it (Refused stops the search)."""
    for candidate in (Path("exercises") / relative, relative, Path(relative.name)):
        data = _read_inside(submission, candidate)
        if data is not None:
            return data
    return None


def collect(submission: Path, exercises: Path) -> tuple[list[str], list[str], list[str]]:
    """Copy the submitted versions of the editable files over `exercises`; (taken, left as stubs
    because absent, refused: one line each)."""
    taken, missing, refused = [], [], []
    folder = os.open(submission, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for relative in editable_files(exercises):
            try:
                data = _find(folder, relative)
            except Refused as error:
                refused.append(str(error))
                continue
            if data is None:
                missing.append(str(relative))
                continue
            (exercises / relative).write_bytes(data)
            taken.append(str(relative))
    finally:
        os.close(folder)
    return taken, missing, refused


def main() -> int:
    submission, exercises = Path(sys.argv[1]), Path(sys.argv[2])
    taken, missing, refused = collect(submission, exercises)
    print(f"graded from the submission: {', '.join(taken) or 'nothing'}")
    if missing:
        print(f"not in the submission (graded as the untouched stubs): {', '.join(missing)}")
    for reason in refused:
        print(f"refused (graded as the untouched stub): {reason}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
