"""The child side of a `ChildGroup` (chapter 02): the one routine every child process starts with.

`child_main` is the target every child is started with (scheduler ranks, tokenizer workers, the
detokenizer). It makes the process a well-behaved child, then runs the child's body
`target(*args, ready)`. The body builds what it needs and calls `ready(detail)` once it can serve;
from then on it serves until it is stopped.

- start-up fails (an exception before `ready`): an ("error", name, one line) ack tells the launcher
  why, and the process exits with 1;
- serving fails (an exception after `ready`): one log line, no traceback (when a peer rank dies,
  every other rank's next collective fails, and the launcher already names the one that died;
  MINISGL_LOG_LEVEL=DEBUG shows the traceback), and the process exits with 1.

With a trace folder (`--trace DIR`), the child records its timeline from the start and writes it
however it ends: after its body returns or fails, and on the SIGTERM a launcher stops it with.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import multiprocessing.connection
import os
import signal
import threading
from collections.abc import Callable
from multiprocessing.queues import Queue
from pathlib import Path
from typing import Any

from minisgl.message.queues import send_what_is_left
from minisgl.trace import TRACE


Ready = Callable[..., None]  # ready(detail: str = ""): the body is up and serving


def child_main(
    name: str, acks: Queue, target: Callable[..., None], args: tuple[Any, ...], trace_dir: Path | None = None,
) -> None:
    """Become child `name` (it already has its launcher's environment and output: `start_process`),
    run `target(*args, ready)`, and report how start-up went on `acks`; with a `trace_dir`, trace
    it all into that folder."""
    become_child(name)
    if trace_dir is not None:
        trace_until_exit(trace_dir, name)
    started = False
    begin = TRACE.clock()

    def ready(detail: str = "") -> None:
        nonlocal started
        TRACE.complete("start-up", "process", begin, detail=detail)
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
    finally:
        TRACE.save()  # (nothing when not tracing)
        send_what_is_left()  # a forked child skips the interpreter's exit, which would do it


def trace_until_exit(trace_dir: Path, name: str) -> None:
    """Record this process's timeline, and write it before SIGTERM (how a launcher stops the text
    processes, and whatever is left after a graceful stop) ends the process as it would have."""
    TRACE.start(trace_dir, name)

    def save_then_die(signum: int, frame: object) -> None:
        TRACE.save()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)  # the exit code still says "killed by SIGTERM"

    signal.signal(signal.SIGTERM, save_then_die)


def become_child(name: str) -> None:
    """Log with a `[name]` prefix at the launcher's level, leave Ctrl-C to the launcher (it reaches
    the whole process group; the launcher stops us), and exit if the launcher dies."""
    logging.basicConfig(level=os.environ.get("MINISGL_LOG_LEVEL", "WARNING"), format=f"[{name}] %(message)s")
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    exit_when_launcher_dies()


def exit_when_launcher_dies() -> None:
    """No orphans: if the launching process disappears (even by kill -9), this process exits too.

    multiprocessing hands every child a sentinel of the process that started it, a pipe the OS
    closes when that process is gone. It is the launcher's, not our parent's: our parent is the fork
    server (`start.py`), which in turn stays up as long as any child it forked does."""
    launcher = mp.parent_process()
    assert launcher is not None, "child_main runs in a process started by multiprocessing"

    def watch() -> None:
        mp.connection.wait([launcher.sentinel])
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="launcher-watchdog").start()
