"""Grades chapter 02's launcher on real spawned processes: it waits for every ack, returns the
running ranks, and on an error ack, a dead rank or its one deadline raises a message naming the
rank and leaves no process behind.

Orderings are forced, not hoped for: each rank acks at a time the test sets - in an order that is not
rank order, so a launcher that returns the processes in the order they acked cannot pass, and so
that one restarting its timeout at every ack can never finish early enough to pass."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import psutil
import pytest

from exercises.grader import adapters, sandbox
from exercises.grader.outcomes import WrongAnswer

JOB_TIMEOUT_S = 90.0  # a launcher that never returns fails after this long


def _markers(marker_dir: Path) -> dict[int, dict]:
    """What the rank bodies wrote (untrusted: the learner's processes wrote it), rank -> fields."""
    markers = {}
    for path in marker_dir.glob("pid*"):
        try:
            rank, data = int(path.name[3:]), json.loads(path.read_text()[:1000] or "{}")
        except (ValueError, OSError):
            continue
        if type(data) is dict:
            markers[rank] = {k: data.get(k) for k in ("pid", "parent", "forked")}
    return markers


def _running(pid: object) -> bool:
    if type(pid) is not int:
        return False
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.fixture
def marker_dir(impl: str):
    """Where the ranks write their pids (a folder the sandbox may write); any rank still running
    afterwards is killed. The launcher's worker is started first, so the times a test sets for the
    acks count from when the learner's code runs."""
    box = sandbox.current()
    box.pool(impl, adapters.LAUNCH, 1)
    path = box.writable_dir("launch")
    yield path
    for marker in _markers(path).values():
        if _running(marker.get("pid")):
            psutil.Process(marker["pid"]).kill()


def _target(marker_dir: Path, **options) -> dict:
    return {"marker_dir": str(marker_dir), **options}


def _assert_all_stopped(marker_dir: Path, what: str) -> None:
    deadline = time.monotonic() + 3.0
    while (alive := [r for r, m in _markers(marker_dir).items() if _running(m.get("pid"))]) \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    if alive:
        raise WrongAnswer(f"{what}: ranks {sorted(alive)} are still running after start_ranks raised (stop them first)")


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
def test_waits_for_every_ack(impl, world_size, marker_dir):
    # the ranks ack out of rank order, the last one two seconds in: returning before that is returning
    # too early, and returning the processes in the order they acked is returning them out of order
    order = sorted(range(world_size), key=lambda rank: (rank % 2 == 0, -rank))  # 4 ranks: 3, 1, 2, 0
    ack_at = {rank: time.monotonic() + 2.0 * order.index(rank) / max(1, world_size - 1) for rank in range(world_size)}
    result, _ = adapters.start_ranks(impl, _target(marker_dir, ack_at=ack_at), world_size, 60.0, JOB_TIMEOUT_S)
    processes = result.value
    not_ready = [r for r in range(world_size) if not (marker_dir / f"ready{r}").exists()]
    if not_ready:
        raise WrongAnswer(f"start_ranks returned before ranks {not_ready} acked (wait for all {world_size} acks)")
    if not isinstance(processes, list) or len(processes) != world_size:
        raise WrongAnswer(f"start_ranks returned {processes!r:.200}, expected a list of {world_size} processes")
    markers = _markers(marker_dir)
    got = [p["pid"] for p in processes]
    pids = [markers.get(r, {}).get("pid") for r in range(world_size)]
    if got != pids:
        raise WrongAnswer(f"returned pids {got}, but ranks 0..{world_size - 1} run as {pids} (return them in rank "
                          "order)")
    if not all(p["spawn"] for p in processes) or any(m.get("forked") for m in markers.values()):
        raise WrongAnswer("the ranks were not started with the spawn start method "
                          "(multiprocessing.get_context('spawn'))")
    if any(m.get("parent") != result.extra.get("caller") for m in markers.values()):
        raise WrongAnswer("the ranks are not children of the process that called start_ranks")
    dead = [r for r, p in enumerate(processes) if not p["alive"]]
    if dead:
        raise WrongAnswer(f"ranks {dead} are not running after start_ranks returned")


TIMEOUT_S = 2.5  # no digit of it reads as the silent rank (3) in a message


@pytest.mark.task("02-launch/start-ranks", weight=2)
@pytest.mark.error_case
@pytest.mark.timeout(150)
def test_timeout_counts_from_the_start(impl, marker_dir):
    # Ranks 0, 1, 2 ack 0.6, 1.2 and 1.8 timeouts after the call, each within one timeout of the
    # one before; rank 3 never does. One deadline from the start raises after about 1 timeout; a
    # timeout restarted at every ack cannot raise before 1.8 + 1 = 2.8 timeouts.
    world_size, silent = 4, 3
    start = time.monotonic()
    ack_at = {rank: start + 0.6 * (rank + 1) * TIMEOUT_S for rank in range(silent)}
    target = _target(marker_dir, ack_at=ack_at, silent=(silent,))
    message, took = _expect_launch_error(impl, target, world_size, TIMEOUT_S)
    _assert_all_stopped(marker_dir, "timeout")
    if not _names(message, silent):
        raise WrongAnswer(f"the error should name the rank that never acked, {silent}: {message!r}")
    if took > 2.2 * TIMEOUT_S:
        raise WrongAnswer(f"with timeout_s={TIMEOUT_S:g}, start_ranks raised only after {took:.1f} s: the deadline "
                          "must count from the start, not restart at every ack")


@pytest.mark.task("02-launch/start-ranks")
@pytest.mark.error_case
@pytest.mark.timeout(150)
def test_error_ack_is_reported(impl, marker_dir):
    target = _target(marker_dir, failing=(1,))
    message, _ = _expect_launch_error(impl, target, 2, timeout_s=60.0)
    if "could not load its weights (simulated)" not in message or not _names(message, 1):
        raise WrongAnswer(f"the error should name rank 1 and carry its own detail (\"could not load its weights "
                          f"(simulated)\"): {message!r}")
    _assert_all_stopped(marker_dir, "error ack")


@pytest.mark.task("02-launch/start-ranks")
@pytest.mark.error_case
@pytest.mark.timeout(150)
def test_dead_rank_is_noticed(impl, marker_dir):
    target = _target(marker_dir, dying=(1,))
    message, took = _expect_launch_error(impl, target, 2, timeout_s=30.0)
    if took > 15.0:  # the rank dies at once; waiting for the 30 s deadline is the mistake
        raise WrongAnswer(f"start_ranks noticed the dead rank only after {took:.0f} s; watch for exits while waiting")
    if not _names(message, 1):
        raise WrongAnswer(f"the error should name the dead rank 1: {message!r}")
    _assert_all_stopped(marker_dir, "dead rank")


@pytest.mark.task("02-launch/start-ranks")
@pytest.mark.error_case
@pytest.mark.timeout(150)
def test_rejects_bad_arguments(impl, marker_dir):
    target = _target(marker_dir)
    for world_size, timeout_s in ((0, 10.0), (2, 0.0)):
        what = f"start_ranks(world_size={world_size}, timeout_s={timeout_s:g})"
        try:
            adapters.start_ranks(impl, target, world_size, timeout_s, JOB_TIMEOUT_S)
        except ValueError as error:
            if getattr(error, "notes", {}).get("started"):  # counted by the worker: a rank killed at once counts
                raise WrongAnswer(f"{what}: started {error.notes['started']} rank(s) before it rejected its "
                                  "arguments") from None
            continue
        except NotImplementedError:
            raise
        except Exception as error:  # noqa: BLE001 - any other error is the wrong one
            raise WrongAnswer(f"{what}: raised {type(error).__name__} ({error}), expected ValueError") from None
        raise WrongAnswer(f"{what}: returned normally, expected ValueError")
