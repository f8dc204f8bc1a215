"""Small helpers shared by the launcher, the server and the tests."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def reporting_start_failure(ack_queue: Any, who: Any) -> Iterator[None]:
    """Inside a child process's start-up: an exception becomes an ("error", who, one line) ack for
    the launcher, which names the child and stops the others, and this process exits with 1."""
    try:
        yield
    except Exception as error:
        ack_queue.put(("error", who, f"{type(error).__name__}: {error}"))
        raise SystemExit(1) from None
