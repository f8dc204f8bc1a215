"""How a graded test can end besides passing: the exceptions the report knows by name."""

from __future__ import annotations


class NotAttempted(Exception):
    """The task still raises NotImplementedError (or a quiz answer is still None)."""


class WrongAnswer(AssertionError):
    """The implementation ran and returned something wrong; the message says what and where."""


class OffLimits(WrongAnswer):
    """The implementation called the engine's own code for the task being graded."""


class ImplementationError(Exception):
    """The implementation could not be loaded or called (missing file or function, syntax error)."""


class Submitted(Exception):
    """A well-formed quiz answer where no key is at hand (a student release): the autograder grades it."""
