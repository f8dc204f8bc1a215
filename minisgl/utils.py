"""Small helpers shared by the launcher, the server and the tests."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


IPC_DIR_PREFIX = "minisgl-ipc-"


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


@contextmanager
def reporting_start_failure(ack_queue: Any, who: Any) -> Iterator[None]:
    """Inside a child process's start-up: an exception becomes an ("error", who, one line) ack for
    the launcher, which names the child and stops the others, and this process exits with 1."""
    try:
        yield
    except Exception as error:
        ack_queue.put(("error", who, f"{type(error).__name__}: {error}"))
        raise SystemExit(1) from None
