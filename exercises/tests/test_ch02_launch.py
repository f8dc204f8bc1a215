"""Grades chapter 02's launcher on real spawned processes: it waits for every ack, returns the
running ranks, and on an error ack, a dead rank or a timeout raises a message naming the rank and
leaves no process behind."""

from __future__ import annotations

import functools
import re
import time
from pathlib import Path

import psutil
import pytest

from exercises.grader import adapters, targets
from exercises.grader.outcomes import WrongAnswer


def _pids(marker_dir: Path) -> dict[int, int]:
    return {int(p.name[3:]): int(p.read_text() or 0) for p in marker_dir.glob("pid*")}


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.fixture
def marker_dir(tmp_path: Path):
    """Where the ranks write their pids; any rank still running afterwards is killed."""
    yield tmp_path
    for pid in _pids(tmp_path).values():
        if pid and _running(pid):
            psutil.Process(pid).kill()


def _assert_all_stopped(marker_dir: Path, what: str) -> None:
    deadline = time.monotonic() + 3.0
    while (alive := [r for r, pid in _pids(marker_dir).items() if pid and _running(pid)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    if alive:
        raise WrongAnswer(f"{what}: ranks {sorted(alive)} are still running after start_ranks raised (stop them first)")


def _names(message: str, rank: int) -> bool:
    """Does `message` mention `rank` as a number of its own ("rank 1", "[1]", "TP1")?"""
    return re.search(rf"(?<![\d.]){rank}(?![\d.])", message) is not None


def _expect_launch_error(impl: str, target, world_size: int, timeout_s: float, within_s: float) -> str:
    start = time.monotonic()
    try:
        processes = adapters.start_ranks(impl, target, world_size, timeout_s)
    except RuntimeError as error:
        if isinstance(error, NotImplementedError):
            raise
        elapsed = time.monotonic() - start
        if elapsed > within_s:
            raise WrongAnswer(f"start_ranks raised only after {elapsed:.1f} s; expected within {within_s:.0f} s") from None
        return str(error)
    for process in processes:
        process.kill()
    raise WrongAnswer(f"start_ranks returned {len(processes)} processes; expected a RuntimeError")


@pytest.mark.task("02-launch/start-ranks", weight=2)
@pytest.mark.timeout(120)
def test_waits_for_every_ack(impl, world_size, marker_dir):
    target = functools.partial(targets.behave, marker_dir=str(marker_dir), delay_s=0.3)
    processes = adapters.start_ranks(impl, target, world_size, 60.0)
    try:
        not_ready = [r for r in range(world_size) if not (marker_dir / f"ready{r}").exists()]
        if not_ready:
            raise WrongAnswer(f"start_ranks returned before ranks {not_ready} acked (wait for all {world_size} acks)")
        if len(processes) != world_size:
            raise WrongAnswer(f"start_ranks returned {len(processes)} processes, expected {world_size}")
        pids = _pids(marker_dir)
        got = [getattr(p, "pid", None) for p in processes]
        if got != [pids[r] for r in range(world_size)]:
            raise WrongAnswer(f"returned pids {got}, but ranks 0..{world_size - 1} run as {[pids[r] for r in range(world_size)]}")
        dead = [r for r, p in enumerate(processes) if not p.is_alive()]
        if dead:
            raise WrongAnswer(f"ranks {dead} are not running after start_ranks returned")
    finally:
        for process in processes:
            process.kill()
            process.join()


@pytest.mark.task("02-launch/start-ranks")
@pytest.mark.timeout(120)
def test_timeout_names_missing_rank(impl, marker_dir):
    world_size, silent = 3, 1
    target = functools.partial(targets.behave, marker_dir=str(marker_dir), silent=(silent,))
    message = _expect_launch_error(impl, target, world_size, timeout_s=3.0, within_s=30.0)
    if not _names(message, silent):
        raise WrongAnswer(f"the error should name the missing rank {silent}: {message!r}")
    _assert_all_stopped(marker_dir, "timeout")


@pytest.mark.task("02-launch/start-ranks")
@pytest.mark.timeout(120)
def test_error_ack_is_reported(impl, marker_dir):
    target = functools.partial(targets.behave, marker_dir=str(marker_dir), failing=(1,))
    message = _expect_launch_error(impl, target, 2, timeout_s=60.0, within_s=30.0)
    if "could not load its weights (simulated)" not in message:
        raise WrongAnswer(f"the error should carry rank 1's own detail: {message!r}")
    _assert_all_stopped(marker_dir, "error ack")


@pytest.mark.task("02-launch/start-ranks")
@pytest.mark.timeout(120)
def test_dead_rank_is_noticed(impl, marker_dir):
    target = functools.partial(targets.behave, marker_dir=str(marker_dir), dying=(1,))
    message = _expect_launch_error(impl, target, 2, timeout_s=60.0, within_s=30.0)
    if not _names(message, 1):
        raise WrongAnswer(f"the error should name the dead rank 1: {message!r}")
    _assert_all_stopped(marker_dir, "dead rank")
