"""How starting or watching child processes fails (chapters 02 and 12): every error names the
child, or the node, that caused it."""

from __future__ import annotations


class LaunchError(RuntimeError):
    """A child failed to start, did not start in time, or died; the message names it."""


class ChildDied(LaunchError):
    """A child process exited; `exitcode` is negative when a signal killed it."""

    def __init__(self, message: str, exitcode: int) -> None:
        super().__init__(message)
        self.exitcode = exitcode


class NodeLost(LaunchError):
    """Another node of a multi-node run went away: its link to this node closed (`nodes.py`)."""
