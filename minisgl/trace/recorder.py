"""The trace recorder (chapters 02, 06, 07 and 10): what one process did, and when, as spans (a
name, a start, a duration) and instants (a name, a moment), each with a few plain arguments.

There is one recorder per process, `TRACE`, off until `start(folder, process)`; `--trace DIR` (the
server) and `LLM(trace=DIR)` start it in every process of the run (`process/child.py`), and each
process writes its events to `DIR/trace-<process>-<pid>.json` when it exits (`save`). Off, a hook
costs one attribute check (`TRACE.enabled`) or one call that returns at once.

Timestamps come from `time.perf_counter_ns()`: monotonic (a wall clock can be stepped by NTP in the
middle of a run, which would give spans a negative length) and precise to the nanosecond. At start
the recorder reads the wall clock (`time.time_ns()`) next to it, once: that (wall, monotonic)
anchor turns every timestamp into wall time when the file is written, and lets `merge` line up the
processes (`chrome.py`).

Memory is bounded: the events live in a ring of `MAX_EVENTS` (about 40 MB); when it is full the
oldest go, and the file says how many were dropped.
"""

from __future__ import annotations

import socket
import time
from collections import Counter, deque
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any, NamedTuple

from .chrome import merge, process_trace, write_trace

MAX_EVENTS = 100_000  # ~40 MB; ~65 per step of a 30-layer model at tp > 1: its last ~1500 steps

_OFF = nullcontext()


class Event(NamedTuple):
    """One span (`ph` "X", with `dur_ns`) or instant (`ph` "i", `dur_ns` 0), as Chrome names them."""

    ph: str
    name: str
    cat: str  # "process", "message", "batch", "collective", "text" or "request"
    ts_ns: int  # perf_counter_ns() at its start
    dur_ns: int
    args: dict[str, Any]


class Recorder:
    def __init__(self) -> None:
        self.enabled = False
        self.process = ""
        self.folder: Path | None = None
        self.events: deque[Event] = deque(maxlen=MAX_EVENTS)
        self.recorded = 0  # events ever recorded: those beyond the ring's size were dropped
        self.anchor = (0, 0)  # (time.time_ns(), time.perf_counter_ns()) read together at start
        self._collectives: Counter[str] = Counter()  # calls per collective kind: their `seq`

    def start(self, folder: str | Path, process: str) -> None:
        """Record from now on, as process `process`; `save` writes into `folder`."""
        self.folder, self.process = Path(folder), process
        self.events.clear()
        self.recorded = 0
        self._collectives.clear()
        before = time.perf_counter_ns()
        wall = time.time_ns()
        after = time.perf_counter_ns()
        self.anchor = (wall, (before + after) // 2)  # the wall reading sits between the two others
        self.enabled = True

    clock = staticmethod(time.perf_counter_ns)  # what `complete` takes as `begin_ns`

    def span(self, name: str, cat: str, **args: Any) -> AbstractContextManager[None]:
        """`with TRACE.span(...)`: the block as one span; nothing when off."""
        return self._span(name, cat, args) if self.enabled else _OFF

    @contextmanager
    def _span(self, name: str, cat: str, args: dict[str, Any]) -> Iterator[None]:
        begin = time.perf_counter_ns()
        try:
            yield
        finally:
            self.complete(name, cat, begin, **args)

    def complete(self, name: str, cat: str, begin_ns: int, end_ns: int | None = None, **args: Any) -> None:
        """A span from `begin_ns` (a `clock()` reading) to `end_ns` (default: now). A collective gets
        `seq`, its number among this process's collectives of that kind: every rank of a group runs
        the same ones in the same order, so `seq` pairs them up across ranks."""
        if not self.enabled:
            return
        end = time.perf_counter_ns() if end_ns is None else end_ns
        if cat == "collective":
            args["seq"] = self._collectives[name]
            self._collectives[name] += 1
        self._add(Event("X", name, cat, begin_ns, end - begin_ns, args))

    def instant(self, name: str, cat: str, **args: Any) -> None:
        if self.enabled:
            self._add(Event("i", name, cat, time.perf_counter_ns(), 0, args))

    def _add(self, event: Event) -> None:
        self.events.append(event)
        self.recorded += 1

    def save(self) -> Path | None:
        """Write this process's events as a Chrome trace (`chrome.py`); the path, or None when off
        or empty (a process that did nothing worth a track)."""
        if not self.enabled or self.folder is None or not self.events:
            return None
        self.folder.mkdir(parents=True, exist_ok=True)
        trace = process_trace(self.events, self.process, socket.gethostname(), self.anchor,
                              dropped=self.recorded - len(self.events))
        return write_trace(trace, self.folder / f"trace-{self.process}-{trace['otherData']['pid']}.json")

    def finish(self) -> Path | None:
        """The launcher's last word, once every child has exited (and written its file): write this
        process's file, stop recording, and merge the folder (`chrome.merge`); the merged file, or
        None when no process wrote one (a run that failed to start)."""
        if not self.enabled or self.folder is None:
            return None
        self.save()
        self.stop()
        return merge(self.folder) if any(self.folder.glob("trace-*.json")) else None

    def stop(self) -> None:
        self.enabled = False
        self.events.clear()


def check_trace_dir(folder: str | Path) -> None:
    """A run's trace needs a folder of its own: `merge` takes every trace file in it. Raises a
    one-line ValueError for a folder that already holds one."""
    if any(Path(folder).glob("trace*.json")):
        raise ValueError(f"{folder} already holds a trace; pass an empty or new folder to trace this run")


TRACE = Recorder()
