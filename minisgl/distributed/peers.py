"""Who the other ranks of a group are (chapters 02 and 12): each rank's process name, machine and
pid, gathered once when the group has formed, so that a rank whose collective fails can say which
peer died instead of blaming the requests of the step it was running.

When a rank is killed, every other rank's next collective fails at once (gloo reads a closed
connection) with words about sockets, and the scheduler would report "a decode step of request(s)
3, 4 failed". The launcher names the dead rank correctly in its last line; with this, the
surviving ranks' own lines agree with it.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import psutil
import torch.distributed as dist

PEER_EXIT_WAIT_S = 2.0  # a killed peer closes its sockets a moment before its process is gone


@dataclass(frozen=True)
class Peer:
    rank: int
    name: str  # its process name, e.g. minisgl-TP1-scheduler
    host: str
    pid: int

    def __str__(self) -> str:
        return f"rank {self.rank} ({self.name}, pid {self.pid} on {self.host})"


class PeerDied(RuntimeError):
    """A peer rank's process is gone; this rank's collectives cannot go on."""


def gather_peers(group: dist.ProcessGroup) -> list[Peer]:
    """Every rank of `group`, by rank: one all_gather_object on its (gloo) CPU group at start-up."""
    mine = (mp.current_process().name, socket.gethostname(), os.getpid())
    everyone: list[tuple[str, str, int] | None] = [None] * dist.get_world_size(group)
    dist.all_gather_object(everyone, mine, group=group)
    return [Peer(rank, *who) for rank, who in enumerate(everyone) if who is not None]


@contextmanager
def naming_dead_peers(peers: list[Peer]) -> Iterator[None]:
    """An error inside becomes `PeerDied` naming the peer when a peer on this machine has died;
    any other error passes as it is."""
    try:
        yield
    except Exception as error:
        dead = dead_peers(peers)
        if dead:
            raise PeerDied(f"peer {', '.join(str(peer) for peer in dead)} died; this rank stops too") from error
        raise


def dead_peers(peers: list[Peer], wait_s: float = PEER_EXIT_WAIT_S) -> list[Peer]:
    """The peers on this machine whose process is gone (or a zombie), waiting up to `wait_s` for one
    to be. A peer on another machine cannot be looked at from here; its node's launcher says when
    it goes."""
    here = socket.gethostname()
    local = [peer for peer in peers if peer.host == here and peer.pid != os.getpid()]
    deadline = time.monotonic() + wait_s
    while True:
        dead = [peer for peer in local if not _alive(peer.pid)]
        if dead or not local or time.monotonic() >= deadline:
            return dead
        time.sleep(0.01)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
