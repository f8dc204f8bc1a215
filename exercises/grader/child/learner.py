"""The learner's functions as a sandboxed worker sees them: modules of the staged package
`exercises` (only the files a learner edits are there), and a data account of what they raise."""

from __future__ import annotations

import importlib
import os
import traceback
from collections.abc import Callable
from typing import Any

PACKAGE = "exercises"  # the learner's files are staged under this name, so their own imports work
_HARNESS = os.path.dirname(os.path.abspath(__file__))


class TaskError(Exception):
    """The learner's module or function could not be found (a message for the learner)."""


def function(module: str, name: str, package: str = PACKAGE) -> Callable[..., Any]:
    """The learner's `name` in `<package>/<module>.py`, imported on first use (so whatever the
    module does at import time happens inside a job, where its errors are reported)."""
    try:
        loaded = importlib.import_module(f"{package}.{module}")
    except ModuleNotFoundError as error:
        if error.name in (package, f"{package}.{module}"):
            raise TaskError(f"exercises/{module}.py is missing; restore it from git") from None
        raise
    fn = getattr(loaded, name, None)
    if not callable(fn):
        raise TaskError(f"exercises/{module}.py has no function {name}(); restore its stub from git")
    return fn


def _builtin_base(error: BaseException) -> str:
    """The nearest built-in exception class of `error` (a learner's subclass of ValueError: ValueError)."""
    for cls in type(error).__mro__:
        if cls.__module__ == "builtins":
            return cls.__name__
    return "Exception"


def _text(error: BaseException) -> str:
    try:
        return str(error)[:2000]
    except Exception:  # noqa: BLE001 - a learner's __str__ may itself raise
        return "?"


def describe(error: BaseException, roots: dict[str, str]) -> dict[str, Any]:
    """What the grader is told of an exception: its type, its built-in base, its message, whether it
    means "not attempted" or "off limits", and the last frames outside this harness, named
    relative to `roots` (folder -> the name shown for it)."""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if not f.filename.startswith(_HARNESS)]
    where = []
    for frame in frames[-3:]:
        name = frame.filename
        for root, shown in roots.items():
            if name.startswith(root + os.sep):
                name = os.path.join(shown, name[len(root) + 1:])
                break
        where.append(f"{name}:{frame.lineno} in {frame.name}: {(frame.line or '').strip()}"[:300])
    return {
        "type": type(error).__name__[:80],
        "base": _builtin_base(error),
        "message": _text(error),
        "not_implemented": isinstance(error, NotImplementedError),
        "off_limits": type(error).__name__ == "OffLimits",
        "where": where,
    }
