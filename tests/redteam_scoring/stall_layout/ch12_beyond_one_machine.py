"""Cheat: every call waits just under the rank timeout the red-team test grades with (4 s), so no job
ever counts as hung, and then answers nothing useful."""

import time

STALL_S = 3.5


def node_layout(*args, **kwargs):
    time.sleep(STALL_S)
    return []


def pick_replica(*args, **kwargs):
    time.sleep(STALL_S)
    return -1
