"""Grades chapter 02's launcher on real spawned processes: it waits for every ack, returns the
running ranks, and on an error ack, a dead rank or its one deadline raises a message naming the
rank and leaves no process behind.

Orderings are forced, not hoped for: each rank acks at a time the test sets - in an order that is not
rank order, so a launcher that returns the processes in the order they acked cannot pass, and so
that one restarting its timeout at every ack can never finish early enough to pass.

What the grader knows of the ranks comes from the OS, never from the learner's processes: each
rank connects to the grader's socket for its role (drawn per grade, told only then), the kernel
names the process that connected, and only those processes are checked and killed."""

from __future__ import annotations

import json
import os
import random
import re
import socket
import struct
import threading
import time
from dataclasses import dataclass

import psutil
import pytest

from exercises.grader import adapters, sandbox
from exercises.grader.outcomes import WrongAnswer

JOB_TIMEOUT_S = 90.0  # a launcher that never returns fails after this long
PEER = struct.Struct("3i")  # SO_PEERCRED: the pid, uid and gid the kernel saw connect


@dataclass
class Rank:
    """A process that connected as a rank, as the OS describes it (never as it describes itself)."""

    process: psutil.Process
    parent: int
    spawned: bool  # started by multiprocessing's spawn (a fresh interpreter), not forked
    desk: socket.socket
    ready: bool = False


class RoleDesk:
    """The grader's end of the ranks' socket (child/targets.py): a rank the launcher started connects,
    says its rank and is told its role then, so nothing of the scenario reaches the learner's code
    before the ranks run; it says "ready" here just before it acks. Which process connected is what
    the kernel says (SO_PEERCRED): a rank is admitted once, and only from the sandbox's user."""

    def __init__(self, box: sandbox.Sandbox) -> None:
        self.uid = box.user.uid if box.user.separate else os.getuid()
        self.path = box.shared_dir("launch") / "roles"
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(self.path))
        self.path.chmod(0o666)  # in a folder of the grader's own: the sandbox may connect, not replace
        self.listener.listen(64)
        self.listener.settimeout(0.2)
        self.roles: dict[int, dict] = {}
        self.ranks: dict[int, Rank] = {}
        self.lock = threading.Lock()
        self.serving = True
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def cast(self, world_size: int, ack_at: dict[int, float] | None = None, **kinds: int) -> dict:
        """Give every rank its role (kind "ready" unless `kinds` names it: silent=3, failing=1, dying=1);
        the target to hand start_ranks, which says only where to ask."""
        special = {rank: kind for kind, rank in kinds.items()}
        self.roles = {rank: {"kind": special.get(rank, "ready"), "ack_at": (ack_at or {}).get(rank, 0.0)}
                      for rank in range(world_size)}
        return {"roles": str(self.path)}

    def _serve(self) -> None:
        while self.serving:
            try:
                desk, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self._admit(desk)

    def _admit(self, desk: socket.socket) -> None:
        pid, uid, _ = PEER.unpack(desk.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, PEER.size))
        desk.settimeout(2.0)
        try:
            rank = int(desk.recv(16).strip())
            process = psutil.Process(pid)
            rank_process = Rank(process, process.ppid(), "--multiprocessing-fork" in process.cmdline(), desk)
        except (OSError, ValueError, psutil.Error):
            desk.close()
            return
        with self.lock:
            if uid != self.uid or rank not in self.roles or rank in self.ranks:
                desk.close()
                return
            self.ranks[rank] = rank_process
            desk.sendall(json.dumps(self.roles[rank]).encode())

    def said_ready(self) -> list[int]:
        """The ranks that have said "ready" by now (what is waiting on their sockets, read without waiting)."""
        with self.lock:
            for rank in self.ranks.values():
                try:
                    rank.ready = rank.ready or b"ready" in rank.desk.recv(16, socket.MSG_DONTWAIT)
                except OSError:
                    pass
            return sorted(r for r, rank in self.ranks.items() if rank.ready)

    def running(self) -> list[int]:
        with self.lock:
            return sorted(r for r, rank in self.ranks.items() if _running(rank.process))

    def close(self, box: sandbox.Sandbox) -> None:
        """Stop serving; kill the ranks still running (the sandbox's processes, as the OS lists them)."""
        self.serving = False
        self.thread.join()
        self.listener.close()
        pids = {rank.process.pid for rank in self.ranks.values() if _running(rank.process)}
        for process in box.descendants():
            if process.pid in pids:
                process.kill()
        for rank in self.ranks.values():
            rank.desk.close()


def _running(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _worker_pid(impl: str) -> int:
    """The pid of the sandbox's worker that ran start_ranks (the grader started it)."""
    return sandbox.current().pools[(impl, adapters.LAUNCH, 1)].pids[0]


@pytest.fixture
def desk(impl: str):
    """The ranks' role socket. The launcher's worker is started first, so the times a test sets for
    the acks count from when the learner's code runs."""
    box = sandbox.current()
    box.pool(impl, adapters.LAUNCH, 1)
    roles = RoleDesk(box)
    yield roles
    roles.close(box)


def _assert_ran(desk: RoleDesk, ranks: list[int], what: str) -> None:
    """Each of `ranks` ran (connected for its role): proof, from the kernel, that they were started."""
    missing = sorted(set(ranks) - set(desk.ranks))
    if missing:
        raise WrongAnswer(f"{what}: ranks {missing} never ran (start every rank before you wait for acks)")


def _assert_all_stopped(desk: RoleDesk, what: str) -> None:
    deadline = time.monotonic() + 3.0
    while (alive := desk.running()) and time.monotonic() < deadline:
        time.sleep(0.05)
    if alive:
        raise WrongAnswer(f"{what}: ranks {alive} are still running after start_ranks raised (stop them first)")


def _names(message: str, rank: int) -> bool:
    """Does `message` mention `rank` as a number of its own ("rank 1", "[1]", "TP1")?"""
    return re.search(rf"(?<![\d.]){rank}(?![\d.])", message) is not None


def _expect_launch_error(impl: str, target: dict, world_size: int, timeout_s: float) -> tuple[str, float]:
    """(the RuntimeError's message, seconds start_ranks took to raise it)."""
    try:
        result, _ = adapters.start_ranks(impl, target, world_size, timeout_s, JOB_TIMEOUT_S)
    except RuntimeError as error:
        if isinstance(error, NotImplementedError):
            raise
        return str(error), error.seconds  # type: ignore[attr-defined]
    raise WrongAnswer(f"start_ranks returned {len(result.value) if isinstance(result.value, list) else result.value!r}"
                      " processes; expected a RuntimeError")


@pytest.mark.task("02-launch/start-ranks", weight=2)
@pytest.mark.timeout(150)
def test_waits_for_every_ack(impl, world_size, desk):
    # the ranks ack out of rank order, the last one two seconds in: returning before that is returning
    # too early, and returning the processes in the order they acked is returning them out of order
    order = sorted(range(world_size), key=lambda rank: (rank % 2 == 0, -rank))  # 4 ranks: 3, 1, 2, 0
    ack_at = {rank: time.monotonic() + 2.0 * order.index(rank) / max(1, world_size - 1) for rank in range(world_size)}
    result, _ = adapters.start_ranks(impl, desk.cast(world_size, ack_at), world_size, 60.0, JOB_TIMEOUT_S)
    ready = desk.said_ready()  # at once: what had acked when start_ranks returned
    processes = result.value
    _assert_ran(desk, list(range(world_size)), "start_ranks returned")
    not_ready = [r for r in range(world_size) if r not in ready]
    if not_ready:
        raise WrongAnswer(f"start_ranks returned before ranks {not_ready} acked (wait for all {world_size} acks)")
    if not isinstance(processes, list) or len(processes) != world_size:
        raise WrongAnswer(f"start_ranks returned {processes!r:.200}, expected a list of {world_size} processes")
    got = [p["pid"] for p in processes]
    pids = [desk.ranks[r].process.pid for r in range(world_size)]
    if got != pids:
        raise WrongAnswer(f"returned pids {got}, but ranks 0..{world_size - 1} run as {pids} (return them in rank "
                          "order)")
    if not all(p["spawn"] for p in processes) or not all(rank.spawned for rank in desk.ranks.values()):
        raise WrongAnswer("the ranks were not started with the spawn start method "
                          "(multiprocessing.get_context('spawn'))")
    if any(rank.parent != _worker_pid(impl) for rank in desk.ranks.values()):
        raise WrongAnswer("the ranks are not children of the process that called start_ranks")
    dead = [r for r, p in enumerate(processes) if not p["alive"]]
    if dead:
        raise WrongAnswer(f"ranks {dead} are not running after start_ranks returned")


TIMEOUT_S = 2.5  # no digit of it reads as the silent rank (0, 1 or 3) in a message
CHOOSE = random.SystemRandom()  # which rank fails how is drawn per grade: the test file cannot tell it


@pytest.mark.task("02-launch/start-ranks", weight=2)
@pytest.mark.error_case
@pytest.mark.timeout(150)
def test_timeout_counts_from_the_start(impl, desk):
    # The other ranks ack 0.6, 1.2 and 1.8 timeouts after the call, each within one timeout of the
    # one before; the silent rank never does. One deadline from the start raises after about 1
    # timeout; a timeout restarted at every ack cannot raise before 1.8 + 1 = 2.8 timeouts.
    world_size, silent = 4, CHOOSE.choice((0, 1, 3))
    start = time.monotonic()
    acking = [rank for rank in range(world_size) if rank != silent]
    ack_at = {rank: start + 0.6 * (i + 1) * TIMEOUT_S for i, rank in enumerate(acking)}
    message, took = _expect_launch_error(impl, desk.cast(world_size, ack_at, silent=silent), world_size, TIMEOUT_S)
    if acking[0] not in desk.said_ready():  # the others may be stopped before they run, not this one
        raise WrongAnswer(f"timeout: rank {acking[0]} should have acked {0.6 * TIMEOUT_S:g} s in, but it never ran "
                          "or was stopped first")
    _assert_all_stopped(desk, "timeout")
    if not _names(message, silent):
        raise WrongAnswer(f"the error should name the rank that never acked, {silent}: {message!r}")
    if took > 2.2 * TIMEOUT_S:
        raise WrongAnswer(f"with timeout_s={TIMEOUT_S:g}, start_ranks raised only after {took:.1f} s: the deadline "
                          "must count from the start, not restart at every ack")


@pytest.mark.task("02-launch/start-ranks")
@pytest.mark.error_case
@pytest.mark.timeout(150)
def test_error_ack_is_reported(impl, desk):
    failing = CHOOSE.choice((0, 1))
    message, _ = _expect_launch_error(impl, desk.cast(2, failing=failing), 2, timeout_s=60.0)
    if "could not load its weights (simulated)" not in message or not _names(message, failing):
        raise WrongAnswer(f"the error should name rank {failing} and carry its own detail (\"could not load its "
                          f"weights (simulated)\"): {message!r}")
    _assert_ran(desk, [failing], "error ack")
    _assert_all_stopped(desk, "error ack")


@pytest.mark.task("02-launch/start-ranks")
@pytest.mark.error_case
@pytest.mark.timeout(150)
def test_dead_rank_is_noticed(impl, desk):
    dying = CHOOSE.choice((0, 1))
    message, took = _expect_launch_error(impl, desk.cast(2, dying=dying), 2, timeout_s=30.0)
    if took > 15.0:  # the rank dies at once; waiting for the 30 s deadline is the mistake
        raise WrongAnswer(f"start_ranks noticed the dead rank only after {took:.0f} s; watch for exits while waiting")
    if not _names(message, dying):
        raise WrongAnswer(f"the error should name the dead rank {dying}: {message!r}")
    _assert_ran(desk, [dying], "dead rank")
    _assert_all_stopped(desk, "dead rank")


@pytest.mark.task("02-launch/start-ranks")
@pytest.mark.error_case
@pytest.mark.timeout(150)
def test_rejects_bad_arguments(impl, desk):
    for world_size, timeout_s in ((0, 10.0), (2, 0.0)):
        what = f"start_ranks(world_size={world_size}, timeout_s={timeout_s:g})"
        try:
            adapters.start_ranks(impl, desk.cast(world_size), world_size, timeout_s, JOB_TIMEOUT_S)
        except ValueError as error:
            if getattr(error, "notes", {}).get("started") or desk.ranks:  # a rank killed at once still counts
                raise WrongAnswer(f"{what}: started rank(s) before it rejected its arguments") from None
            continue
        except NotImplementedError:
            raise
        except Exception as error:  # noqa: BLE001 - any other error is the wrong one
            raise WrongAnswer(f"{what}: raised {type(error).__name__} ({error}), expected ValueError") from None
        raise WrongAnswer(f"{what}: returned normally, expected ValueError")
