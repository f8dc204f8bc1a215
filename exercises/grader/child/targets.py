"""Rank bodies for the launch exercise (chapter 02): tiny processes that ack when told, stay
silent, report an error, or die. Importing this module is cheap (no torch), so spawned ranks start fast.

Each writes `pid<rank>` into `marker_dir` first - its pid, its parent's pid, and whether it was
forked (a forked child carries the grader's modules; a spawned one starts empty) - and
`ready<rank>` just before it acks. None outlives its launcher or LIFETIME_S. The grader reads those
files as untrusted data (they are written by processes the learner's code started).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

LIFETIME_S = 60.0
GRADER_MODULE = "grader_child.worker"  # imported by the grader's worker process, never by a spawned rank


def behave(rank: int, world_size: int, acks: Any, marker_dir: str, ack_at: dict[int, float] | None = None,
           silent: tuple[int, ...] = (), failing: tuple[int, ...] = (), dying: tuple[int, ...] = ()) -> None:
    """Ack ("ready", rank, detail) at time.monotonic() `ack_at[rank]` (at once if absent), unless
    this rank is silent, failing (acks ("error", rank, detail)) or dying (exits with code 3)."""
    parent = os.getppid()
    Path(marker_dir, f"pid{rank}").write_text(json.dumps(
        {"pid": os.getpid(), "parent": parent, "forked": GRADER_MODULE in sys.modules}))
    time.sleep(max(0.0, (ack_at or {}).get(rank, 0.0) - time.monotonic()))  # the clock is shared by all processes
    if rank in dying:
        os._exit(3)
    if rank in failing:
        acks.put(("error", rank, "could not load its weights (simulated)"))  # the launcher must add who
    elif rank not in silent:
        Path(marker_dir, f"ready{rank}").touch()
        acks.put(("ready", rank, f"rank {rank} of {world_size} ready"))
    deadline = time.monotonic() + LIFETIME_S
    while time.monotonic() < deadline and os.getppid() == parent:  # serve until stopped
        time.sleep(0.05)
