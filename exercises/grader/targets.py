"""Rank bodies for the launch exercise (chapter 02): tiny processes that ack in turn, stay silent,
report an error, or die. Importing this module is cheap (no torch), so spawned ranks start fast.

Each writes `pid<rank>` into `marker_dir` first (so the grader can check that none is left running)
and `ready<rank>` just before it acks. None outlives its launcher or LIFETIME_S.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

LIFETIME_S = 60.0


def behave(rank: int, world_size: int, acks: Any, marker_dir: str, delay_s: float = 0.0,
           silent: tuple[int, ...] = (), failing: tuple[int, ...] = (), dying: tuple[int, ...] = ()) -> None:
    """Ack ("ready", rank, detail) after `delay_s * rank` seconds, unless this rank is silent,
    failing (acks ("error", rank, detail)) or dying (exits with code 3 before acking)."""
    parent = os.getppid()
    Path(marker_dir, f"pid{rank}").write_text(str(os.getpid()))
    time.sleep(delay_s * rank)  # higher ranks ack later: the last ack comes from the last rank
    if rank in dying:
        os._exit(3)
    if rank in failing:
        acks.put(("error", rank, f"rank {rank} could not load its weights (simulated)"))
    elif rank not in silent:
        Path(marker_dir, f"ready{rank}").touch()
        acks.put(("ready", rank, f"rank {rank} of {world_size} ready"))
    deadline = time.monotonic() + LIFETIME_S
    while time.monotonic() < deadline and os.getppid() == parent:  # serve until stopped
        time.sleep(0.05)
