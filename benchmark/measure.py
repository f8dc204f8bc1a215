"""What every benchmark behind a chapter's numbers shares: the label of the machine, random token-id
prompts, a timed call, the order in which compared settings take turns, the median (and spread) of
the rounds, and the record written beside a chapter's data (command, machine, date, commit).

A comparison is fair when each setting has already run the whole workload once, untimed (so every
kernel variant the timed runs need is compiled, every graph captured, every cache warm), when the
settings take turns in ABBA order (so drift of the machine, a clock or a neighbour's load falls on
both alike), and when the number quoted is the median of several rounds, with the spread beside it.
"""

from __future__ import annotations

import json
import os
import random
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

import torch

T = TypeVar("T")
ROOT = Path(__file__).resolve().parent.parent


def hardware_label(device: str) -> str:
    """What ran it: `2x NVIDIA H200`, or `cpu, 2 cores (AMD EPYC)`."""
    if device == "cuda":
        return f"{torch.cuda.device_count()}x {torch.cuda.get_device_name(0)}"
    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.exists() else []
    model = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), "unknown CPU")
    return f"cpu, {os.cpu_count()} cores ({model})"


def prompts(count: int, length: int, vocab: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(3, vocab) for _ in range(length)] for _ in range(count)]


def timed(fn: Callable[[], Any]) -> float:
    """Seconds `fn()` took."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def abba(settings: Sequence[T], rounds: int) -> Iterator[tuple[int, T]]:
    """(round, setting) in turns: A B, B A, A B, ... (for more than two settings, the order and its reverse)."""
    for r in range(rounds):
        for setting in (settings if r % 2 == 0 else list(reversed(settings))):
            yield r, setting


def spread(values: Sequence[float]) -> dict[str, float]:
    """The median of the rounds, and the smallest and largest, for a number quoted as `m (lo to hi)`."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "rounds": len(values)}


def save_record(path: Path, device: str, results: dict[str, Any]) -> None:
    """Write `results` to `path` as JSON, with the command that made them, the machine, the date and
    the commit: what a chapter's number needs beside it to be made again."""
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                                timeout=10).stdout.strip() or "unknown"
    except (OSError, subprocess.TimeoutExpired):
        commit = "unknown"
    script = Path(sys.argv[0]).resolve()
    shown = script.relative_to(ROOT) if script.is_relative_to(ROOT) else script
    record = {
        "command": shlex.join(["python", str(shown), *sys.argv[1:]]),
        "machine": hardware_label(device),
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        "commit": commit,
        "torch": torch.__version__,
        "results": results,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {path}", flush=True)
