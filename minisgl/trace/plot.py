"""A matplotlib timeline of a merged trace, for notebooks (chapters 02, 06, 07 and 10): one lane
per process, top to bottom in the order data flows (front-end, tokenizers, ranks, detokenizer).

- spans are bars: a forward is striped with the colour of each request in its batch, a message or
  a text span takes the colour of its request, start-up spans are grey;
- collectives are thin black bars under their forward, so the all-reduces of one forward show as a
  comb; instants are ticks (tokens: a triangle in the request's colour);
- `window=(start_ms, end_ms)` zooms in; `step_window(trace, step)` is the window of one step.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from .chrome import load

LANE = 1.0
BAR = 0.6  # of a lane's height
PROCESS_GREY = "#b8b8b8"
GREYS = (PROCESS_GREY, "#959595", "#737373")  # darker as spans nest


def plot(trace: str | Path | dict[str, Any], window: tuple[float, float] | None = None, ax: Any = None,
         title: str | None = None, labels: bool = True) -> Any:
    """Draw `trace` (a `--trace` folder, a merged file, or `load`'s dict); times in ms from the
    first event. Returns the matplotlib Axes."""
    import matplotlib.pyplot as plt

    trace = trace if isinstance(trace, dict) else load(trace)
    lanes = _lanes(trace)
    if ax is None:
        _, ax = plt.subplots(figsize=(12, 0.7 * len(lanes) + 1.2))
    start, end = window if window is not None else (0.0, _end_ms(trace))
    step_uids = _step_uids(trace)
    seen: set[int] = set()  # requests drawn, for the legend
    for row, (pid, name) in enumerate(lanes):
        y = -row * LANE
        open_until: list[float] = []  # ends of the spans that contain this one: its nesting depth
        for event in sorted((e for e in trace["traceEvents"] if e["pid"] == pid and e["ph"] != "M"),
                            key=lambda e: (e["ts"], -e.get("dur", 0.0))):
            begin = event["ts"] / 1000
            finish = begin + event.get("dur", 0.0) / 1000
            if event["ph"] == "X" and event["cat"] != "collective":
                open_until = [t for t in open_until if t > begin]
                depth = len(open_until)
                open_until.append(finish)
            if finish < start or begin > end:
                continue
            if event["ph"] == "X":
                uids = step_uids.get((pid, event["args"].get("step")))
                seen |= _draw_span(ax, event, begin, finish, y, depth, uids, labels, end - start)
            else:
                seen |= _draw_instant(ax, event, begin, y)
    _legend(ax, seen)
    ax.set_yticks([-row * LANE for row in range(len(lanes))], [name for _, name in lanes])
    ax.set_xlim(start, end)
    ax.set_ylim(-(len(lanes) - 0.5) * LANE, 0.5 * LANE)
    ax.set_xlabel("time (ms)")
    ax.grid(axis="x", alpha=0.3)
    if title:
        ax.set_title(title)
    return ax


def step_window(trace: str | Path | dict[str, Any], step: int, margin: float = 0.15) -> tuple[float, float]:
    """(start_ms, end_ms) around step number `step` on every rank: its schedule to its tokens,
    widened by `margin` of its length on each side."""
    trace = trace if isinstance(trace, dict) else load(trace)
    times = [(e["ts"] / 1000, (e["ts"] + e.get("dur", 0.0)) / 1000) for e in trace["traceEvents"]
             if e["ph"] != "M" and e.get("cat") == "batch" and e["args"].get("step") == step]
    if not times:
        raise ValueError(f"no step {step} in this trace; steps run from 1 to {max(_steps(trace), default=0)}")
    begin, end = min(t[0] for t in times), max(t[1] for t in times)
    pad = margin * (end - begin)
    return begin - pad, end + pad


def request_colour(uid: int) -> Any:
    import matplotlib

    return matplotlib.colormaps["tab10"](uid % 10)


def _lanes(trace: dict[str, Any]) -> list[tuple[int, str]]:
    names = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"}
    order = {e["pid"]: e["args"]["sort_index"] for e in trace["traceEvents"] if e["name"] == "process_sort_index"}
    return sorted(names.items(), key=lambda item: order.get(item[0], item[0]))


def _step_uids(trace: dict[str, Any]) -> dict[tuple[int, int], list[int]]:
    """(pid, step) -> the uids of that step's batch, from the scheduler's `schedule` instants."""
    return {(e["pid"], e["args"]["step"]): e["args"]["uids"] for e in trace["traceEvents"] if e["name"] == "schedule"}


def _steps(trace: dict[str, Any]) -> set[int]:
    return {e["args"]["step"] for e in trace["traceEvents"] if e["name"] == "schedule"}


def _end_ms(trace: dict[str, Any]) -> float:
    return max((e["ts"] + e.get("dur", 0.0)) / 1000 for e in trace["traceEvents"] if e["ph"] != "M")


def _uid_of(event: dict[str, Any]) -> int | None:
    """The one request a span belongs to, if it belongs to one."""
    args = event["args"]
    if "uid" in args:
        return args["uid"]
    uids = {int(m) for text in args.get("messages", []) for m in re.findall(r"Request (\d+)", text)}
    return uids.pop() if len(uids) == 1 else None


def _draw_span(ax: Any, event: dict[str, Any], begin: float, finish: float, y: float, depth: int,
               uids: list[int] | None, labels: bool, width_ms: float) -> set[int]:
    """One span; a span inside another is drawn thinner, on top of it. Returns the requests it drew."""
    width = max(finish - begin, width_ms * 1e-3)  # too short to see otherwise
    if event["cat"] == "collective":  # a thin comb under the forward that runs it
        ax.broken_barh([(begin, width)], (y - BAR / 2, BAR / 5), color="black")
        return set()
    height = BAR * 0.75 * 0.6**depth
    bottom = y - BAR / 4 + (BAR * 0.75 - height) / 2
    drawn: set[int] = set()
    if event["cat"] == "batch" and uids:
        for i, uid in enumerate(uids):  # one stripe per request of the batch
            ax.broken_barh([(begin, width)], (bottom + i * height / len(uids), height / len(uids)),
                           color=request_colour(uid))
        drawn = set(uids)
    else:
        uid = _uid_of(event)
        colour = GREYS[min(depth, len(GREYS) - 1)] if uid is None else request_colour(uid)
        ax.broken_barh([(begin, width)], (bottom, height), color=colour, edgecolor="white", linewidth=0.5)
        drawn = set() if uid is None else {uid}
    if labels and width > 0.06 * width_ms:
        step = event["args"].get("step")
        text = event["name"] if step is None else f"{event['name']} {step}"
        if depth == 0:
            ax.text(begin + width / 2, y + BAR * 0.55, text, ha="center", va="bottom", fontsize=7, clip_on=True)
        else:
            ax.text(begin + width / 2, bottom + height / 2, text, ha="center", va="center", fontsize=6,
                    clip_on=True)
    return drawn


def _draw_instant(ax: Any, event: dict[str, Any], at: float, y: float) -> set[int]:
    args = event["args"]
    if event["name"] == "tokens":  # a triangle per request that got its token
        for i, uid in enumerate(args["uids"]):
            ax.plot(at, y + BAR / 2 + 0.08 * i, marker="v", color=request_colour(uid), markersize=6)
        return set(args["uids"])
    uid = args.get("uid")
    ax.plot([at, at], [y - BAR / 2, y + BAR / 2], color="grey" if uid is None else request_colour(uid), lw=0.8)
    return set() if uid is None else {uid}


def _legend(ax: Any, uids: set[int]) -> None:
    from matplotlib.patches import Patch

    handles = [Patch(color=request_colour(uid), label=f"request {uid}") for uid in sorted(uids)[:10]]
    handles += [Patch(color="black", label="collective"), Patch(color=PROCESS_GREY, label="start-up, other")]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7, frameon=False)
