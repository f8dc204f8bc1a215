"""How minisgl starts a child process (chapter 02): Python's `forkserver` start method, with the
heavy libraries imported once, and what a child must still take from its launcher by hand.

`spawn` starts every child as a fresh interpreter that imports torch, transformers and ZMQ itself:
1.5-2.5 s of CPU per child on a quiet core, several times that when the six processes of a tp = 3
server import on two cores at once. `forkserver` keeps what made spawn the safe choice, that no
child inherits the launcher's threads, CUDA context, OpenMP pool or ZMQ sockets: children are forked
from a small server process, not from the launcher. That server was itself started fresh, imported
`PRELOAD` (importing them starts no thread and no CUDA context) and does nothing but fork, so each
child starts with those modules already in memory.

A child forked from that server inherits what the server had when it started, not what the launcher
has now. A spawned child would get two things from its launcher at the moment it starts, so
`start_process` sends them along with the child's arguments (`LauncherState`) and the child
`adopt`s them before it runs its target:
- the environment (a test sets `TMPDIR`, `MINISGL_LOG_LEVEL` is set by the server's launcher);
- where standard output and error go (pytest's `capfd` moves them from test to test), as file
  descriptors passed over the server's Unix socket.
Libraries read at import time by the preloaded modules are the one thing this cannot redo, so only
third-party libraries are preloaded, never minisgl's own modules (some read the environment).
A forked child also ends differently, with `os._exit` instead of the interpreter's exit, so
`child_main` sends what ZMQ still holds itself (`send_what_is_left` in minisgl/message/queues.py).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import tempfile
from collections.abc import Callable
from multiprocessing import forkserver, reduction
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from typing import Any

# transformers imports lazily: `activations` is what reading any model's config (a tokenizer does)
# pulls in, torch.distributed.tensor included, ~1 s of CPU that every tokenizer child paid itself
PRELOAD = ("torch", "transformers", "transformers.activations", "zmq", "safetensors.torch")


def child_context() -> BaseContext:
    """The start method of every minisgl child: forkserver, its server importing `PRELOAD` once."""
    context = mp.get_context("forkserver")
    context.set_forkserver_preload(list(PRELOAD))  # read when the server starts: the first child's start
    return context


def start_process(context: BaseContext, target: Callable[..., None], args: tuple[Any, ...], name: str | None = None,
                  daemon: bool = False) -> BaseProcess:
    """Start `target(*args)` in a child of `context` that first takes this launcher's environment and
    output of now, as a spawned child would have them. `target` must be a module-level function:
    the child imports it by name."""
    process = context.Process(target=_adopt_then_run, args=(LauncherState(), target, args), name=name, daemon=daemon)
    process.start()
    return process


def _adopt_then_run(launcher: ReceivedState, target: Callable[..., None], args: tuple[Any, ...]) -> None:
    launcher.adopt()
    target(*args)


class LauncherState:
    """The launcher's environment and standard output/error at the moment a child is started
    (`start_process` sends one with every child)."""

    def __init__(self) -> None:
        self.environ = dict(os.environ)

    def __reduce__(self) -> tuple[Any, ...]:
        # runs while the child's arguments are pickled for the server: DupFd sends the descriptors
        # themselves with them (a bare number would mean whatever that number is in the child)
        return ReceivedState, (self.environ, reduction.DupFd(1), reduction.DupFd(2))


class ReceivedState:
    """A `LauncherState` as it arrives in the child."""

    def __init__(self, environ: dict[str, str], stdout: Any, stderr: Any) -> None:
        self.environ = environ
        self._stdio = (stdout, stderr)

    def adopt(self) -> None:
        """Become what a spawned child of the launcher would be: its environment, its stdout/stderr."""
        os.environ.clear()
        os.environ.update(self.environ)
        tempfile.tempdir = None  # the server may have cached its own TMPDIR's answer (Python 3.12 does)
        for target, received in zip((1, 2), self._stdio):
            fd = received.detach()
            os.dup2(fd, target)
            os.close(fd)


def start_child_server() -> None:
    """Start the fork server now, so that its imports overlap whatever the launcher does before its
    first child (a server imports its web stack meanwhile)."""
    child_context()  # sets the preload list the server reads as it starts
    forkserver.ensure_running()
