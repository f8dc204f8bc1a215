"""The child-process group and the typed ZMQ queues, on real processes and sockets: children ack and
stop; a start failure, a silent death and a timeout each raise one error naming the child, and
leave no child and no ipc folder behind; a queue carries typed messages and never waits forever."""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import time
from types import SimpleNamespace

import pytest

from minisgl.core import SamplingParams
from minisgl.message import AbortRequest, GenerateRequest, PubQueue, PullQueue, PushQueue, SubQueue
from minisgl.process import ChildDied, ChildGroup, LaunchError, Ready, first_dead
from minisgl.process.start import start_child_server

pytestmark = pytest.mark.timeout(120)


# ---- child bodies (module level: a child imports them by name) ---------------------------------------
def _serve(ready: Ready) -> None:
    ready("up")
    time.sleep(60)


def _fail_at_start(ready: Ready) -> None:
    raise ValueError("no weights here")


def _exit_silently(ready: Ready) -> None:
    os._exit(3)


def _never_ready(ready: Ready) -> None:
    time.sleep(60)


def _send_before_anyone_listens(addr: str, done_path: str, ready: Ready) -> None:
    ready()
    outbox = PushQueue(addr)  # nobody has bound `addr` yet: the message waits in this process
    outbox.put(AbortRequest(7))
    outbox.close(linger_ms=30_000)  # it may wait up to 30 s for a reader
    open(done_path, "w").close()  # the body returns now; the reader binds only after this


LAUNCHER_STATE = "as imported"  # a test changes it in the launcher; a child must not see the change


def _report_what_it_inherited(out_path: str, ready: Ready) -> None:
    print("a line from the child", file=sys.stderr, flush=True)
    report = {"mark": os.environ.get("MINISGL_TEST_MARK"), "tmp": tempfile.gettempdir(), "state": LAUNCHER_STATE}
    with open(out_path, "w") as f:
        json.dump(report, f)
    ready()
    time.sleep(60)


def _assert_stopped(group: ChildGroup) -> None:
    assert not any(p.is_alive() for p in group.processes)
    assert not os.path.exists(group.ipc_dir)


def test_children_ack_then_stop() -> None:
    group = ChildGroup()
    group.spawn("minisgl-a", _serve)
    group.spawn("minisgl-b", _serve)
    try:
        group.wait_ready(60)
        assert all(p.is_alive() for p in group.processes)
        group.check_alive()
    finally:
        group.stop()
    _assert_stopped(group)


def test_a_start_failure_is_named_in_the_childs_own_words() -> None:
    group = ChildGroup()
    group.spawn("minisgl-fine", _serve)
    group.spawn("minisgl-broken", _fail_at_start)
    with pytest.raises(LaunchError, match="^minisgl-broken failed to start: ValueError: no weights here$"):
        group.wait_ready(60)
    _assert_stopped(group)


def test_a_silent_death_is_named_by_its_exit_code() -> None:
    group = ChildGroup()
    group.spawn("minisgl-fine", _serve)
    group.spawn("minisgl-silent", _exit_silently)
    with pytest.raises(ChildDied, match=r"^minisgl-silent \(pid \d+\) exited with code 3$"):
        group.wait_ready(60)
    _assert_stopped(group)


def test_a_timeout_names_the_missing_child_and_the_fix() -> None:
    group = ChildGroup()
    group.spawn("minisgl-slow", _never_ready)
    with pytest.raises(LaunchError, match=r"^minisgl-slow did not start within 3 s \(raise --start-timeout\)$"):
        group.wait_ready(3, fix="raise --start-timeout")
    _assert_stopped(group)


def test_a_child_takes_the_launchers_environment_and_output_of_now_but_none_of_its_state(tmp_path, monkeypatch) -> None:
    """Children are forked from a server started earlier (minisgl/process/start.py): what a spawned
    child would inherit from the launcher at its start (environment, stdout/stderr) must still be
    the launcher's of now; what a forked launcher would leak (its Python state) must not arrive."""
    start_child_server()  # (or already running): its environment and stderr are those of this moment
    monkeypatch.setenv("MINISGL_TEST_MARK", "set after the server started")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(sys.modules[__name__], "LAUNCHER_STATE", "changed by the launcher")
    out_path, err_path = tmp_path / "report.json", tmp_path / "stderr.txt"
    saved_stderr = os.dup(2)
    with open(err_path, "w") as err:
        os.dup2(err.fileno(), 2)  # what pytest's capfd does between tests
    try:
        group = ChildGroup()
        group.spawn("minisgl-report", _report_what_it_inherited, str(out_path))
        try:
            group.wait_ready(60)
        finally:
            group.stop()
    finally:
        os.dup2(saved_stderr, 2)
        os.close(saved_stderr)
    report = json.loads(out_path.read_text())
    assert report["mark"] == "set after the server started"
    assert report["tmp"] == str(tmp_path)
    assert report["state"] == "as imported"  # a fresh import, not a copy of this process
    assert "a line from the child" in err_path.read_text()


def test_what_a_child_sent_last_arrives_although_its_body_returned_before_a_reader_listened(tmp_path) -> None:
    """A child forked from the fork server ends with os._exit, skipping the interpreter's exit that
    would wait for ZMQ's lingering messages; `child_main` must wait itself (the DP controller's
    forwarded ShutdownRequest was lost 3 times in 10 without it)."""
    addr, done = f"ipc://{tmp_path}/inbox", tmp_path / "body-returned"
    group = ChildGroup()
    try:
        group.spawn("minisgl-sender", _send_before_anyone_listens, addr, str(done))
        group.wait_ready(60)
        deadline = time.monotonic() + 60
        while not done.exists():
            assert time.monotonic() < deadline, "the child's body never returned"
            time.sleep(0.01)
        inbox = PullQueue(addr)
        try:
            assert [m.uid for m in inbox.get_all(wait_ms=30_000)] == [7]
        finally:
            inbox.close()
        group.processes[0].join(30)
        assert group.processes[0].exitcode == 0
    finally:
        group.stop()


def test_the_child_killed_by_a_signal_is_the_one_named() -> None:
    victim = SimpleNamespace(exitcode=1)  # its collective failed because the other one died
    killed = SimpleNamespace(exitcode=-signal.SIGKILL)
    running = SimpleNamespace(exitcode=None)
    assert first_dead([running, victim, killed]) is killed
    assert first_dead([running, victim]) is victim
    assert first_dead([running]) is None


# ---- queues ------------------------------------------------------------------------------------------
def test_push_pull_carries_typed_messages_in_order(tmp_path) -> None:
    addr = f"ipc://{tmp_path}/inbox"
    inbox, outbox = PullQueue(addr), PushQueue(addr)
    try:
        assert inbox.get_all(wait_ms=0) == []
        request = GenerateRequest(7, [1, 2, 3], SamplingParams(temperature=0, max_tokens=4))
        outbox.put(request)
        outbox.put(AbortRequest(7))
        assert inbox.get() == request
        assert inbox.get() == AbortRequest(7)
    finally:
        inbox.close()
        outbox.close()


def test_pub_sub_forwards_bytes_once_everyone_subscribed(tmp_path) -> None:
    addr = f"ipc://{tmp_path}/broadcast"
    publisher = PubQueue(addr)
    subscribers = [SubQueue(addr, timeout_ms=10_000) for _ in range(2)]
    try:
        publisher.wait_for_subscribers(2, timeout_ms=10_000)
        publisher.put_raw(b"step 1")
        assert [s.get_raw() for s in subscribers] == [b"step 1", b"step 1"]
    finally:
        for queue in [publisher, *subscribers]:
            queue.close()


def test_broadcast_queues_time_out_with_one_line(tmp_path) -> None:
    subscriber = SubQueue(f"ipc://{tmp_path}/nobody-publishes", timeout_ms=200)
    publisher = PubQueue(f"ipc://{tmp_path}/nobody-subscribes")
    try:
        with pytest.raises(TimeoutError, match="^rank 0 published nothing for 0.2 s$"):
            subscriber.get_raw()
        with pytest.raises(TimeoutError, match="^0 of 1 ranks subscribed to rank 0's broadcast within 0.2 s$"):
            publisher.wait_for_subscribers(1, timeout_ms=200)
    finally:
        subscriber.close()
        publisher.close()
