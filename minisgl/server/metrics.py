"""`GET /metrics`: the server's numbers in Prometheus' text format, the convention of vLLM and
SGLang, so a Prometheus server (or `curl`) can read them (chapter 11).

The frontend counts requests itself; the scheduler's numbers (prefix-cache hits, KV pages,
running / waiting / retracted requests) come from rank 0, which sends a `SchedulerStats` along its
outputs about once a second: no rank does anything extra but rank 0, and nothing needs a collective.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields

from minisgl.message import SchedulerStats

from .frontend import Frontend

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
PREFIX = "minisgl_"

Samples = list[tuple[dict[str, str], float]]  # (labels, value) per line

# rank 0's numbers: (name, type, help, the samples of one report)
SCHEDULER_METRICS: list[tuple[str, str, str, Callable[[SchedulerStats], Samples]]] = [
    ("num_requests_running", "gauge", "Requests admitted by the scheduler (prefilling or decoding).",
     lambda s: [({}, s.num_running)]),
    ("num_requests_waiting", "gauge", "Requests waiting for admission, retracted ones included.",
     lambda s: [({}, s.num_waiting)]),
    ("kv_pages", "gauge", "KV cache pages: used by running requests, cached for later ones, or free.",
     lambda s: [({"state": "in_use"}, s.kv_pages_total - s.kv_pages_free - s.kv_pages_cached),
                ({"state": "cached"}, s.kv_pages_cached), ({"state": "free"}, s.kv_pages_free)]),
    ("prompt_tokens_total", "counter", "Tokens prefilled at admission (a retracted request counts again).",
     lambda s: [({}, s.prompt_tokens_total)]),
    ("prefix_cache_hit_tokens_total", "counter", "Prompt tokens found in the prefix cache, not computed.",
     lambda s: [({}, s.cached_tokens_total)]),
    ("prefix_cache_hit_rate", "gauge", "prefix_cache_hit_tokens_total / prompt_tokens_total.",
     lambda s: [({}, hit_rate(s))]),
    ("retractions_total", "counter", "Requests sent back to the waiting queue because the KV cache was full.",
     lambda s: [({}, s.retracted_total)]),
    ("generation_tokens_total", "counter", "Tokens generated.", lambda s: [({}, s.generated_tokens_total)]),
]


def render_metrics(frontend: Frontend, num_replicas: int = 1) -> str:
    """Every metric for the whole server; with data parallelism (`num_replicas` > 1) each of rank 0's
    numbers also once per replica, as `minisgl_replica_<name>{replica="d"}`. The per-replica ones are
    their own metrics rather than extra samples of the server's: a query summing a metric over its
    labels then never counts a replica twice."""
    out: list[str] = []

    def metric(name: str, kind: str, text: str, samples: Samples) -> None:
        """One metric: its HELP and TYPE lines, then a line per (labels, value) sample."""
        out.append(f"# HELP {PREFIX}{name} {text}")
        out.append(f"# TYPE {PREFIX}{name} {kind}")
        out.extend(f"{PREFIX}{name}{_labels(labels)} {value}" for labels, value in samples)

    metric("requests_total", "counter", "Requests submitted to the tokenizers.", [({}, frontend.num_submitted)])
    metric("requests_finished_total", "counter", "Requests finished, by finish reason.",
           [({"reason": reason}, count) for reason, count in sorted(frontend.num_finished.items())])
    metric("requests_in_flight", "gauge", "Requests the API is waiting on.", [({}, frontend.num_pending)])
    if frontend.stats:  # (rank 0 reports within a second of starting)
        total = summed(list(frontend.stats.values()))
        for name, kind, text, samples in SCHEDULER_METRICS:
            metric(name, kind, text, samples(total))
    if num_replicas > 1:
        reports = sorted(frontend.stats.items())
        for name, kind, text, samples in SCHEDULER_METRICS:
            metric(f"replica_{name}", kind, f"{text} Per data-parallel replica.",
                   [({"replica": str(replica), **labels}, value) for replica, stats in reports
                    for labels, value in samples(stats)])
    return "\n".join(out) + "\n"


def _labels(labels: dict[str, str]) -> str:
    return "{" + ",".join(f'{key}="{value}"' for key, value in labels.items()) + "}" if labels else ""


def summed(reports: list[SchedulerStats]) -> SchedulerStats:
    """The whole server's numbers: every field is a count, so replicas add up."""
    totals = {f.name: sum(getattr(r, f.name) for r in reports) for f in fields(SchedulerStats) if f.name != "replica"}
    return SchedulerStats(**totals)


def hit_rate(stats: SchedulerStats) -> float:
    return stats.cached_tokens_total / stats.prompt_tokens_total if stats.prompt_tokens_total else 0.0
