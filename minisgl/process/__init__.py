"""Child processes (chapter 02): one `ChildGroup` spawns, acks, watches and stops every child of a
run; `child_main` is the one routine each child starts with."""

from .child import Ready, child_main
from .group import (
    ChildDied,
    ChildGroup,
    ChildWatcher,
    LaunchError,
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
    "Ready",
    "child_main",
    "describe_exit",
    "first_dead",
    "stop_processes",
    "wait_for_acks",
]
