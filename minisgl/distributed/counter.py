"""The communication counter (chapters 09 and 12): count, bytes and time of every collective the
seam runs, per forward pass and per layer. Off by default; `EngineConfig.comm_stats_dir` (the
`--comm-stats-dir` flag) turns it on, and each rank writes what it counted there when it stops.

The engine wraps each forward in `COMM_COUNTER.forward(phase, num_tokens)`, the model says where
it is with `comm_site("embed_tokens" | layer index | "lm_head")`, and the seam (`impl.py`) hands
each collective to `COMM_COUNTER.run` while `COMM_COUNTER.enabled`: when counting, and when the
trace records (`minisgl.trace`), which gets each collective as a span from this same timing. Off,
that costs one attribute check per collective and one assignment per layer. Counting, a CPU
collective is timed by the clock (gloo returns when it is done); a CUDA one by two events on the
current stream (NCCL only enqueues), read when the forward ends, so counting adds a device sync per
forward and runs decode without CUDA graphs (a replayed graph runs no Python, so nothing could
count it). The trace's span of a CUDA collective is its enqueue on the host, and the collectives of
a replayed graph do not show in the trace either.

Bytes are those of the tensor each rank hands in: for an all-reduce the payload of chapter 09's
formula (`tokens · hidden · bytes`), for the LM head's all-gather this rank's shard of the logits.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from minisgl.trace import TRACE

Site = int | str  # a decoder layer's index, or "embed_tokens" / "lm_head" / "from_prev_stage" / "to_next_stage"


@dataclass
class Tally:
    """Collectives of one kind at one site, summed over forwards."""

    calls: int = 0
    bytes: int = 0
    seconds: float = 0.0

    def add(self, nbytes: int, seconds: float) -> None:
        self.calls += 1
        self.bytes += nbytes
        self.seconds += seconds


@dataclass
class PhaseStats:
    """Every forward of one phase ("prefill" or "decode"): how many, how long, and their collectives
    by (site, kind)."""

    forwards: int = 0
    tokens: int = 0
    seconds: float = 0.0
    collectives: dict[tuple[Site, str], Tally] = field(default_factory=dict)

    def comm_seconds(self) -> float:
        return sum(t.seconds for t in self.collectives.values())

    def to_json(self) -> dict:
        return {
            "forwards": self.forwards, "tokens": self.tokens, "seconds": self.seconds,
            "comm_seconds": self.comm_seconds(),
            "collectives": [{"site": site, "kind": kind, "calls": t.calls, "bytes": t.bytes, "seconds": t.seconds}
                            for (site, kind), t in self.collectives.items()],
        }


@dataclass
class Record:
    """One collective of the last forward: kind, site, bytes handed in, seconds."""

    kind: str
    site: Site
    nbytes: int
    seconds: float


class CommCounter:
    def __init__(self) -> None:
        self.counting = False  # tallies per forward and per layer (--comm-stats-dir)
        self.enabled = False  # the seam hands each collective to `run`: counting, or tracing
        self.site: Site = ""
        self.phases: dict[str, PhaseStats] = {}
        self.last_forward: list[Record] = []  # every collective of the latest forward, in order
        self._pending: list[tuple[str, Site, int, object, object]] = []  # CUDA: (…, start event, end event)

    def run(self, kind: str, x: torch.Tensor, collective: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        """`collective(x)`, timed, filed under the current site, and traced."""
        nbytes = x.numel() * x.element_size()
        on_device = x.is_cuda and self.counting
        if on_device:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        begin = time.perf_counter_ns()
        out = collective(x)
        finish = time.perf_counter_ns()
        if on_device:
            end.record()
            self._pending.append((kind, self.site, nbytes, start, end))
        elif self.counting:
            self._pending.append((kind, self.site, nbytes, (finish - begin) / 1e9, None))
        TRACE.complete(kind, "collective", begin, finish, site=self.site, bytes=nbytes, device=x.device.type)
        return out

    def configure(self, counting: bool) -> None:
        """Count from now on, or not; the seam calls `run` while counting or tracing."""
        self.counting = counting
        self.enabled = counting or TRACE.enabled

    def forward(self, phase: str, num_tokens: int, device: torch.device) -> AbstractContextManager[None]:
        """Count the collectives of one forward pass under `phase`; nothing when the counter is off."""
        return self._counted_forward(phase, num_tokens, device) if self.counting else nullcontext()

    @contextmanager
    def _counted_forward(self, phase: str, num_tokens: int, device: torch.device) -> Iterator[None]:
        self._pending.clear()
        cuda = device.type == "cuda"
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        begin = time.perf_counter()
        yield
        if cuda:
            end.record()
            end.synchronize()
            seconds = start.elapsed_time(end) / 1e3
        else:
            seconds = time.perf_counter() - begin
        self._file(phase, num_tokens, seconds)

    def _file(self, phase: str, num_tokens: int, seconds: float) -> None:
        stats = self.phases.setdefault(phase, PhaseStats())
        stats.forwards += 1
        stats.tokens += num_tokens
        stats.seconds += seconds
        self.last_forward = []
        for kind, site, nbytes, start, end in self._pending:
            took = start.elapsed_time(end) / 1e3 if end is not None else start  # events, or seconds
            stats.collectives.setdefault((site, kind), Tally()).add(nbytes, took)
            self.last_forward.append(Record(kind, site, nbytes, took))
        self._pending.clear()

    def reset(self) -> None:
        self.phases.clear()
        self.last_forward = []

    def to_json(self) -> dict:
        return {phase: stats.to_json() for phase, stats in self.phases.items()}

    def write(self, stats_dir: str | Path, **labels: Any) -> None:
        """What was counted, after `labels` that say whose it is, as JSON in `stats_dir`; counting stops.
        The file is `comm-tp{rank}.json`, `comm-dp{replica}-tp{rank}.json` with data parallelism and
        `comm-pp{stage}-tp{rank}.json` with pipeline stages."""
        replica = f"dp{labels['dp_rank']}-" if labels["dp_size"] > 1 else ""
        stage = f"pp{labels['pp_rank']}-" if labels["pp_size"] > 1 else ""
        path = Path(stats_dir) / f"comm-{replica}{stage}tp{labels['tp_rank']}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({**labels, "phases": self.to_json()}, indent=1))
        self.reset()
        self.configure(counting=False)


COMM_COUNTER = CommCounter()


def comm_site(site: Site) -> None:
    """The model is now at `site`: the counter files the next collectives under it."""
    COMM_COUNTER.site = site
