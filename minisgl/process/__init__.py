"""Child processes (chapter 02): one `ChildGroup` spawns, acks, watches and stops every child of a
run; `child_main` is the one routine each child starts with; `nodes` links the launchers of a
multi-node run (chapter 12)."""

from .child import Ready, child_main
from .errors import ChildDied, LaunchError, NodeLost
from .group import (
    ChildGroup,
    ChildWatcher,
    describe_exit,
    first_dead,
    stop_processes,
    wait_for_acks,
)

__all__ = [
    "ChildDied",
    "ChildGroup",
    "ChildWatcher",
    "LaunchError",
    "NodeLost",
    "Ready",
    "child_main",
    "describe_exit",
    "first_dead",
    "stop_processes",
    "wait_for_acks",
]
