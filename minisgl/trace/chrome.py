"""Traces as Chrome trace JSON (chapter 02), the format Perfetto (ui.perfetto.dev) and
`chrome://tracing` open: one file per process as it exits, and `merge`, which lines the processes'
clocks up and writes them all into one `trace.json` with one track per process.

Lining the clocks up, in two steps:
- Processes on one machine share its monotonic clock (`perf_counter_ns` is CLOCK_MONOTONIC on
  Linux, the same counter in every process). Each file carries its (wall, monotonic) anchor, so
  every process of a machine is put on the wall clock of one of them: exact, whatever the wall
  clock did between their starts.
- Machines (chapter 12) share no clock; their wall clocks agree only as well as NTP keeps them.
  A collective gives a check: no rank leaves an all-reduce before every rank has entered it. Over
  every all-reduce and all-gather timed on the host (CPU ranks: on a GPU the span is only the
  enqueue), that bounds how far another machine's clock may be shifted; a machine whose wall clock
  breaks those bounds is moved just inside them, and one that keeps them is left alone.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .recorder import Event

MERGED = "trace.json"
SYNCING = ("all_reduce", "all_gather")  # no rank leaves one before every rank has entered it


def process_trace(
    events: Iterable[Event], process: str, host: str, anchor: tuple[int, int], dropped: int
) -> dict[str, Any]:
    """One process's events as a Chrome trace, timestamps in microseconds of wall time."""
    wall, mono = anchor
    pid = os.getpid()
    out = []
    for event in events:
        chrome = {"ph": event.ph, "name": event.name, "cat": event.cat, "ts": (wall + event.ts_ns - mono) / 1000,
                  "pid": pid, "tid": 0, "args": event.args}
        if event.ph == "X":
            chrome["dur"] = event.dur_ns / 1000
        else:
            chrome["s"] = "t"  # an instant on its thread's track
        out.append(chrome)
    info = {"process": process, "host": host, "pid": pid, "anchor_wall_ns": wall, "anchor_mono_ns": mono,
            "dropped": dropped}
    return {"traceEvents": _names(pid, display_name(process), 0) + out, "displayTimeUnit": "ms", "otherData": info}


def merge(folder: str | Path) -> Path:
    """Every `trace-*.json` of `folder` in one `folder/trace.json`: one track per process (front-end,
    tokenizers, ranks, detokenizer, in the order data flows), clocks lined up, time counted from
    the first event (`otherData.origin_wall_us` says when that was)."""
    folder = Path(folder)
    traces = [json.loads(path.read_text()) for path in sorted(folder.glob("trace-*.json"))]
    if not traces:
        raise FileNotFoundError(f"no trace-*.json in {folder}: run with --trace {folder} (or LLM(trace=...)) first")
    traces.sort(key=lambda trace: process_order(trace["otherData"]["process"]))
    shifts = clock_shifts(traces)
    events: list[dict[str, Any]] = []
    for index, (trace, shift) in enumerate(zip(traces, shifts)):
        events += _names(index, display_name(trace["otherData"]["process"]), index)
        events += [{**e, "pid": index, "ts": e["ts"] + shift} for e in trace["traceEvents"] if e["ph"] != "M"]
    origin = min(e["ts"] for e in events if e["ph"] != "M")
    for event in events:
        if event["ph"] != "M":
            event["ts"] = round(event["ts"] - origin, 3)
    info = {"origin_wall_us": origin, "processes": [t["otherData"] for t in traces], "clock_shifts_us": shifts}
    return write_trace({"traceEvents": events, "displayTimeUnit": "ms", "otherData": info}, folder / MERGED)


def clock_shifts(traces: list[dict[str, Any]]) -> list[float]:
    """Microseconds to add to each trace's timestamps (see the module docstring)."""
    anchors: dict[str, dict[str, Any]] = {}  # host -> the first of its processes, whose wall clock they share
    shifts = []
    for trace in traces:
        info = trace["otherData"]
        ref = anchors.setdefault(info["host"], info)
        offset = (ref["anchor_wall_ns"] - ref["anchor_mono_ns"]) - (info["anchor_wall_ns"] - info["anchor_mono_ns"])
        shifts.append(offset / 1000)
    first_host = traces[0]["otherData"]["host"]
    for host in anchors:
        if host == first_host:
            continue
        low, high = _causal_window(traces, shifts, first_host, host)
        fix = min(max(0.0, low), high) if low <= high else (low + high) / 2  # (bounds that cross: a guess)
        shifts = [s + fix if t["otherData"]["host"] == host else s for t, s in zip(traces, shifts)]
    return shifts


def _causal_window(traces: list[dict[str, Any]], shifts: list[float], ref_host: str, host: str) -> tuple[float, float]:
    """(low, high): shifting `host`'s events by d keeps every collective causal iff low <= d <= high."""
    spans: dict[tuple[str, str, int], dict[str, list[tuple[float, float]]]] = {}
    for trace, shift in zip(traces, shifts):
        group = re.sub(r"TP\d+", "TP", trace["otherData"]["process"])  # the ranks of one replica share it
        for e in trace["traceEvents"]:
            if e.get("cat") == "collective" and e["name"] in SYNCING and e["args"].get("device") == "cpu":
                key = (group, e["name"], e["args"]["seq"])
                begin = e["ts"] + shift
                spans.setdefault(key, {}).setdefault(trace["otherData"]["host"], []).append((begin, begin + e["dur"]))
    low, high = float("-inf"), float("inf")
    for by_host in spans.values():
        for s0, e0 in by_host.get(ref_host, []):
            for s1, e1 in by_host.get(host, []):
                low, high = max(low, s0 - e1), min(high, e0 - s1)  # e1 + d >= s0 and e0 >= s1 + d
    return (0.0, 0.0) if low == float("-inf") else (low, high)


def process_order(process: str) -> tuple[int, int, int, str]:
    """Where a process's track goes: the front-end (server or LLM), tokenizers, the DP controller,
    the ranks by replica and rank, the detokenizer."""
    rank = re.search(r"(?:DP(\d+)-)?TP(\d+)", process)
    if rank:
        return (3, int(rank.group(1) or 0), int(rank.group(2)), process)
    kinds = {"detokenizer": 4, "dp-controller": 2, "tokenizer": 1}
    kind = next((order for word, order in kinds.items() if word in process), 0)
    return (kind, 0, 0, process)


def display_name(process: str) -> str:
    return process.removeprefix("minisgl-")


def _names(pid: int, name: str, sort_index: int) -> list[dict[str, Any]]:
    """Chrome's metadata events: the track's title and place, and its one thread's name."""
    return [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}},
            {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": sort_index}},
            {"ph": "M", "name": "thread_name", "pid": pid, "tid": 0, "args": {"name": "main"}}]


def write_trace(trace: dict[str, Any], path: Path) -> Path:
    """`trace` as JSON with one event per line, so that `less` and `grep` can read it too."""
    head = {k: v for k, v in trace.items() if k != "traceEvents"}
    lines = ",\n".join(json.dumps(e, separators=(",", ":"), default=str) for e in trace["traceEvents"])
    path.write_text(json.dumps(head)[:-1] + ', "traceEvents": [\n' + lines + "\n]}\n")
    return path


def load(folder_or_file: str | Path) -> dict[str, Any]:
    """A merged trace: `folder/trace.json` (merged first if it is not there yet), or that file."""
    path = Path(folder_or_file)
    if path.is_dir():
        path = path / MERGED if (path / MERGED).exists() else merge(path)
    return json.loads(path.read_text())
