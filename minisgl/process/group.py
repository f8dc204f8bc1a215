"""The parent side of the child processes of one run (chapter 02): spawn each child, wait for every
child's ack with a timeout, watch them, and stop them all. The offline `LLM` (tp > 1), the server
and its shell all start their children through one `ChildGroup`.

Every child reports on one ack queue, keyed by its name: ("ready", name, detail) once it serves, or
("error", name, detail) when it cannot start (`child.py`). A child that dies without a word (killed
by the OS, a segfault) is found by its exit code. Either way the error names the child.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import multiprocessing.connection
import os
import queue
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Hashable, Mapping
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from .child import child_main
from .errors import ChildDied, LaunchError, NodeLost
from .nodes import STOP, read_link
from .start import child_context, start_process

logger = logging.getLogger("minisgl")

IPC_DIR_PREFIX = "minisgl-ipc-"
ACK_POLL_S = 0.2  # how often a waiting launcher checks exit codes between acks
LINK_GRACE_S = 2.0  # how long a rank's exit waits for another node's link to close (ChildWatcher)


class ChildGroup:
    """The child processes of one run and the temp folder of their ipc:// sockets (`ipc_dir`); with
    a `trace_dir`, every child records its timeline there (`minisgl.trace`)."""

    def __init__(self, trace_dir: str | Path | None = None) -> None:
        check_main_is_importable()
        self.trace_dir = Path(trace_dir) if trace_dir is not None else None
        self._ctx = child_context()  # forked from a clean server: no torch threads, CUDA or ZMQ state of ours
        self._acks: mp.Queue = self._ctx.Queue()  # ("ready" | "error", child name, detail)
        self.children: dict[str, BaseProcess] = {}  # name -> process, in start order
        self.ipc_dir = make_ipc_dir()

    @property
    def processes(self) -> list[BaseProcess]:
        return list(self.children.values())

    def spawn(self, name: str, target: Callable[..., None], *args: Any) -> BaseProcess:
        """Start child `name` running `target(*args, ready)` (see `child_main`); `target` must be a
        module-level function, because the child imports it by name."""
        process = start_process(self._ctx, child_main, (name, self._acks, target, args, self.trace_dir), name=name)
        self.children[name] = process
        return process

    def wait_ready(self, timeout_s: float, fix: str = "") -> None:
        """Return once every child acked ready; otherwise stop them all and raise (`wait_for_acks`)."""
        try:
            details = wait_for_acks(self.children, self._acks, timeout_s, fix)
        except BaseException:
            self.stop()
            raise
        for name, process in self.children.items():  # a rank's detail: its KV pages, what dtype "auto" became
            logger.info("started %s (pid %d)%s", name, process.pid, f": {details[name]}" if details[name] else "")

    def check_alive(self) -> None:
        """Raise `ChildDied` naming a child that exited (none ever should while the group runs)."""
        culprit = first_dead(self.processes)
        if culprit is not None:
            raise ChildDied(describe_exit(culprit), culprit.exitcode)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop every child that still runs (SIGTERM, then SIGKILL after `timeout_s`) and remove
        the ipc folder."""
        stop_processes(self.processes, timeout_s)
        shutil.rmtree(self.ipc_dir, ignore_errors=True)


def check_main_is_importable() -> None:
    """A spawned child first re-imports the parent's main script by its path. A script read from
    standard input (`python - < script.py`) has no path, and every child would die with an opaque
    error: say so before spawning."""
    main_path = getattr(sys.modules["__main__"], "__file__", None)
    if main_path is not None and not os.path.exists(main_path):
        raise LaunchError(
            f"child processes are spawned, and each re-imports the main script, but it was read from {main_path}: "
            "save it to a file and run `python script.py`"
        )


def wait_for_acks(
    children: Mapping[Hashable, BaseProcess], acks: Any, timeout_s: float, fix: str = ""
) -> dict[Hashable, str]:
    """Return once every child acked ("ready", key, detail) on `acks`: each key's detail. Raise
    `LaunchError` naming the child (by its process name) that acked ("error", key, detail), that
    exited (checked between acks: a child killed by the OS never acks), or that has not acked after
    `timeout_s` (`fix` says how to give it more time)."""
    ready: dict[Hashable, str] = {}
    deadline = time.monotonic() + timeout_s
    while len(ready) < len(children):
        try:
            status, key, detail = acks.get(timeout=ACK_POLL_S)
        except queue.Empty:
            status = None
        if status == "error":
            raise LaunchError(f"{children[key].name} failed to start: {detail}")
        if status == "ready":
            ready[key] = detail
            continue
        culprit = first_dead(list(children.values()))
        if culprit is not None:
            _raise_error_ack(children, acks)  # a child that failed said why just before exiting
            raise ChildDied(describe_exit(culprit), culprit.exitcode)
        if time.monotonic() > deadline:
            waiting = [p.name for k, p in children.items() if k not in ready]
            hint = f" ({fix})" if fix else ""
            raise LaunchError(f"{', '.join(waiting)} did not start within {timeout_s:.0f} s{hint}")
    return ready


def _raise_error_ack(children: Mapping[Hashable, BaseProcess], acks: Any) -> None:
    """Raise the first error ack still on `acks`, if any."""
    while True:
        try:
            status, key, detail = acks.get_nowait()
        except queue.Empty:
            return
        if status == "error":
            raise LaunchError(f"{children[key].name} failed to start: {detail}")


def first_dead(processes: list[BaseProcess]) -> BaseProcess | None:
    """A process that exited, if any. When one death causes others (a rank killed by a signal
    makes its peers' collectives fail), the one killed by a signal is the one to name."""
    dead = [p for p in processes if p.exitcode is not None]
    return min(dead, key=lambda p: p.exitcode >= 0) if dead else None


def describe_exit(process: BaseProcess) -> str:
    code = process.exitcode
    if code is not None and code < 0:
        return f"{process.name} (pid {process.pid}) was killed by {signal.Signals(-code).name}"
    return f"{process.name} (pid {process.pid}) exited with code {code}"


def stop_processes(processes: list[BaseProcess], timeout_s: float = 5.0) -> None:
    """SIGTERM every live process, wait up to `timeout_s` in total, then SIGKILL the stragglers."""
    for process in processes:
        if process.is_alive():
            process.terminate()
    deadline = time.monotonic() + timeout_s
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
        if process.is_alive():
            process.kill()
            process.join()


class ChildWatcher(threading.Thread):
    """Sleeps until a child of `group` exits, or one of the `links` to other nodes speaks or closes
    (the OS wakes it: no polling delay), then records why and calls `on_failure`, which a serving
    loop sets to make itself return. A link that says `stop` (node 0 ends the run, `nodes.py`) sets
    `ended_by` instead of a failure.

    A rank that lost a peer on another node exits too, with code 1, a moment before that node's
    link closes; so when a child exits with code 1 in a multi-node run, the watcher first waits
    `LINK_GRACE_S` for a link, and names the node that went away rather than its own rank."""

    def __init__(self, group: ChildGroup, links: Mapping[str, socket.socket] | None = None) -> None:
        super().__init__(daemon=True, name="child-watcher")
        self.group = group
        self.links = dict(links or {})  # "node 1" -> its link
        self.on_failure: Callable[[str], None] = lambda reason: None
        self.failure: LaunchError | None = None
        self.ended_by: str | None = None  # the node whose link said `stop`
        self._wake_r, self._wake_w = os.pipe()  # stop() writes here to end the wait

    def run(self) -> None:
        links = list(self.links.values())
        ready = mp.connection.wait([p.sentinel for p in self.group.processes] + [self._wake_r] + links)
        if self._wake_r in ready:
            return
        for process in self.group.processes:
            if process.sentinel in ready:
                process.join(1.0)  # its sentinel closes a moment before its exit code can be read
        culprit = first_dead(self.group.processes)
        if links and not any(link in ready for link in links) and culprit is not None and culprit.exitcode == 1:
            ready = mp.connection.wait(links, timeout=LINK_GRACE_S)
        said = {name: read_link(link) for name, link in self.links.items() if link in ready}
        lost = [name for name, words in said.items() if words != STOP]
        self.ended_by = next((name for name, words in said.items() if words == STOP), None)
        if self.ended_by is not None:
            return
        if lost:
            self.failure = NodeLost(f"{lost[0]} went away (its link to this node closed)")
        elif culprit is not None:
            self.failure = ChildDied(describe_exit(culprit), culprit.exitcode)
        if self.failure is not None:
            self.on_failure(str(self.failure))

    def stop(self) -> None:
        os.write(self._wake_w, b"x")
        if self.is_alive():
            self.join()
        os.close(self._wake_r)
        os.close(self._wake_w)


def make_ipc_dir() -> str:
    """A fresh temp folder for this process's ipc:// sockets, named after its pid. Folders whose
    process is gone (killed with -9, so it never cleaned up) are removed first."""
    root = tempfile.gettempdir()
    for name in os.listdir(root):
        if not name.startswith(IPC_DIR_PREFIX):
            continue
        pid = name[len(IPC_DIR_PREFIX):].split("-", 1)[0]
        if pid.isdigit() and not _process_exists(int(pid)):
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)
    return tempfile.mkdtemp(prefix=f"{IPC_DIR_PREFIX}{os.getpid()}-")


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: no signal, only the existence check
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True
