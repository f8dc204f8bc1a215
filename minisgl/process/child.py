"""The child side of a `ChildGroup` (chapter 02): the one routine every child process starts with.

`child_main` is the spawn target of every child (scheduler ranks, tokenizer workers, the
detokenizer). It makes the process a well-behaved child, then runs the child's body
`target(*args, ready)`. The body builds what it needs and calls `ready(detail)` once it can serve;
from then on it serves until it is stopped.

- start-up fails (an exception before `ready`): an ("error", name, one line) ack tells the launcher
  why, and the process exits with 1;
- serving fails (an exception after `ready`): one log line, no traceback (when a peer rank dies,
  every other rank's next collective fails, and the launcher already names the one that died;
  MINISGL_LOG_LEVEL=DEBUG shows the traceback), and the process exits with 1.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from multiprocessing.queues import Queue
from typing import Any

Ready = Callable[..., None]  # ready(detail: str = ""): the body is up and serving


def child_main(name: str, acks: Queue, target: Callable[..., None], args: tuple[Any, ...]) -> None:
    """Become child `name`, run `target(*args, ready)`, and report how start-up went on `acks`."""
    become_child(name)
    started = False

    def ready(detail: str = "") -> None:
        nonlocal started
        acks.put(("ready", name, detail))
        started = True

    try:
        target(*args, ready)
    except Exception as error:
        if not started:
            acks.put(("error", name, f"{type(error).__name__}: {error}"))
        else:
            first_line = str(error).splitlines()[0] if str(error) else ""
            logging.error("stopped: %s: %s", type(error).__name__, first_line)
            logging.debug("traceback", exc_info=True)
        raise SystemExit(1) from None


def become_child(name: str) -> None:
    """Log with a `[name]` prefix at the launcher's level, leave Ctrl-C to the launcher (it reaches
    the whole process group; the launcher stops us), and exit if the launcher dies."""
    logging.basicConfig(level=os.environ.get("MINISGL_LOG_LEVEL", "WARNING"), format=f"[{name}] %(message)s")
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    exit_when_parent_dies()


def exit_when_parent_dies() -> None:
    """No orphans: if the launching process disappears (even by kill -9), this process exits too."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="parent-watchdog").start()
