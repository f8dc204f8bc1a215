"""How a graded test can end besides passing: the exceptions the report knows by name, and the
learner's own exceptions, rebuilt here from the account a sandboxed worker sent (child/learner.py)."""

from __future__ import annotations

import builtins
from typing import Any


class NotAttempted(Exception):
    """The task still raises NotImplementedError (or a quiz answer is still None)."""


class WrongAnswer(AssertionError):
    """The implementation ran and returned something wrong; the message says what and where."""


class OffLimits(WrongAnswer):
    """The implementation called the engine's own code for a task of the course."""


class ImplementationError(Exception):
    """The implementation could not be loaded or called (missing file or function, syntax error)."""


class Submitted(Exception):
    """A well-formed quiz answer where no key is at hand (a student release): the autograder grades it."""


class LearnerRaised(Exception):
    """Marks an exception the learner's code raised in its worker (rebuilt as a subclass of the same
    built-in type, so `except ValueError` in a test still means what it says)."""

    where: list[str] = []
    notes: dict[str, int] = {}  # counts the job reported (chapter 02: ranks started before the raise)

    def details(self) -> str:
        """The message with the frames of the learner's code it came from."""
        return "\n".join([f"{type(self).__name__}: {self}"] + [f"  {line}" for line in self.where])


# built-in bases a rebuilt exception may have; anything else (SystemExit, KeyboardInterrupt...) is
# rebuilt as a plain Exception: nothing a learner raised may end or interrupt the grader
_BASES = {name: getattr(builtins, name) for name in (
    "ValueError", "TypeError", "RuntimeError", "KeyError", "IndexError", "AttributeError", "AssertionError",
    "ZeroDivisionError", "ArithmeticError", "LookupError", "RecursionError", "OverflowError", "NameError",
    "ImportError", "ModuleNotFoundError", "OSError", "UnboundLocalError", "StopIteration", "MemoryError",
)}


def learner_error(info: dict[str, Any]) -> Exception:
    """The exception a worker reported, as one this process can raise and a test can catch."""
    message = info["message"]
    notes = dict(info.get("notes", {}))
    if info["not_implemented"]:
        return NotImplementedError(message)
    if info["off_limits"]:
        return OffLimits(message)
    if info["type"] == "TaskError":
        return ImplementationError(message)
    base = _BASES.get(info["base"], Exception)
    error = type(info["type"], (base, LearnerRaised), {})(message)
    error.where, error.notes = list(info["where"]), notes
    return error
