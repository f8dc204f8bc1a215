"""Rank bodies for the launch exercise (chapter 02): tiny processes that ack when told, stay
silent, report an error, or die. Importing this module is cheap (no torch), so spawned ranks start fast.

A rank learns its role only once it runs: it connects to the grader's socket `roles`, says its
rank, and is told what to do and when (the launcher's target carries no scenario to read). Just
before it acks it says "ready" on that socket, so the grader knows who acked when without any file
or pid a rank could write. None outlives its launcher or LIFETIME_S.
"""

from __future__ import annotations

import json
import os
import socket
import time
from typing import Any

LIFETIME_S = 60.0
ROLE_BYTES = 200  # a role is one short JSON line


def behave(rank: int, world_size: int, acks: Any, roles: str) -> None:
    """Ask the grader for this rank's role, then at time.monotonic() `ack_at` (a clock all processes
    share) ack ("ready", rank, detail), or ack ("error", rank, detail) ("failing"), or exit with
    code 3 ("dying"), or stay silent; then serve until the launcher goes."""
    parent = os.getppid()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as desk:
        desk.settimeout(30.0)
        desk.connect(roles)
        desk.sendall(f"{rank}\n".encode())
        role = json.loads(desk.recv(ROLE_BYTES) or b"{}")
        time.sleep(max(0.0, role.get("ack_at", 0.0) - time.monotonic()))
        if role.get("kind") == "dying":
            os._exit(3)
        if role.get("kind") == "failing":
            acks.put(("error", rank, "could not load its weights (simulated)"))  # the launcher must add who
        elif role.get("kind") == "ready":
            desk.sendall(b"ready\n")
            acks.put(("ready", rank, f"rank {rank} of {world_size} ready"))
        deadline = time.monotonic() + LIFETIME_S
        while time.monotonic() < deadline and os.getppid() == parent:  # serve until stopped
            time.sleep(0.05)
