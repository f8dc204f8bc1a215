"""`GET /metrics`: the server's numbers in Prometheus' text format, the convention of vLLM and
SGLang, so a Prometheus server (or `curl`) can read them (chapter 11).

The frontend counts requests itself; the scheduler's numbers (prefix-cache hits, KV pages,
running / waiting / retracted requests) come from rank 0, which sends a `SchedulerStats` along its
outputs about once a second: no rank does anything extra but rank 0, and nothing needs a collective.
"""

from __future__ import annotations

from dataclasses import fields

from minisgl.message import SchedulerStats

from .frontend import Frontend

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
PREFIX = "minisgl_"


def render_metrics(frontend: Frontend) -> str:
    out: list[str] = []

    def metric(name: str, kind: str, text: str, samples: list[tuple[str, float]]) -> None:
        """One metric: its HELP and TYPE lines, then a line per (labels, value) sample."""
        out.append(f"# HELP {PREFIX}{name} {text}")
        out.append(f"# TYPE {PREFIX}{name} {kind}")
        out.extend(f"{PREFIX}{name}{labels} {value}" for labels, value in samples)

    metric("requests_total", "counter", "Requests submitted to the tokenizers.", [("", frontend.num_submitted)])
    metric("requests_finished_total", "counter", "Requests finished, by finish reason.",
           [(f'{{reason="{reason}"}}', count) for reason, count in sorted(frontend.num_finished.items())])
    metric("requests_in_flight", "gauge", "Requests the API is waiting on.", [("", frontend.num_pending)])
    if not frontend.stats:  # rank 0 has not reported yet (it does within a second of starting)
        return "\n".join(out) + "\n"
    stats = summed(list(frontend.stats.values()))
    metric("num_requests_running", "gauge", "Requests admitted by the scheduler (prefilling or decoding).",
           [("", stats.num_running)])
    metric("num_requests_waiting", "gauge", "Requests waiting for admission, retracted ones included.",
           [("", stats.num_waiting)])
    metric("kv_pages", "gauge", "KV cache pages: used by running requests, cached for later ones, or free.",
           [('{state="in_use"}', stats.kv_pages_total - stats.kv_pages_free - stats.kv_pages_cached),
            ('{state="cached"}', stats.kv_pages_cached), ('{state="free"}', stats.kv_pages_free)])
    metric("prompt_tokens_total", "counter", "Tokens prefilled at admission (a retracted request counts again).",
           [("", stats.prompt_tokens_total)])
    metric("prefix_cache_hit_tokens_total", "counter", "Prompt tokens found in the prefix cache, not computed.",
           [("", stats.cached_tokens_total)])
    metric("prefix_cache_hit_rate", "gauge", "prefix_cache_hit_tokens_total / prompt_tokens_total.",
           [("", hit_rate(stats))])
    metric("retractions_total", "counter", "Requests sent back to the waiting queue because the KV cache was full.",
           [("", stats.retracted_total)])
    metric("generation_tokens_total", "counter", "Tokens generated.", [("", stats.generated_tokens_total)])
    return "\n".join(out) + "\n"


def summed(reports: list[SchedulerStats]) -> SchedulerStats:
    """The whole server's numbers: every field is a count, so replicas add up."""
    totals = {f.name: sum(getattr(r, f.name) for r in reports) for f in fields(SchedulerStats) if f.name != "replica"}
    return SchedulerStats(**totals)


def hit_rate(stats: SchedulerStats) -> float:
    return stats.cached_tokens_total / stats.prompt_tokens_total if stats.prompt_tokens_total else 0.0
