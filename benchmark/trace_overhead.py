"""What the trace costs when it is off (issue 11): each kind of hook the engine runs, timed in a
loop with the recorder off, against the same loop without the hook; and, for scale, the hooks of
one scheduler step. Prints nanoseconds per call.

    python benchmark/trace_overhead.py

A scheduler step with tracing off runs: one `with TRACE.span(...)` (the forward), two
`if TRACE.enabled:` guards (schedule, tokens), one `TRACE.clock()` and one guard in rank 0's or a
peer's `receive`, and one guard in rank 0's `send`; each collective, the counter's one attribute
check, which was there before the trace.
"""

from __future__ import annotations

import timeit

from minisgl.trace import TRACE

CALLS = 1_000_000


def per_call_ns(statement: str, setup: str = "pass") -> float:
    """Best of 5 runs of `CALLS` executions, in ns per execution."""
    glob = {"TRACE": TRACE}
    return min(timeit.repeat(statement, setup, repeat=5, number=CALLS, globals=glob)) / CALLS * 1e9


def step_hooks() -> None:
    """The hooks of one scheduler step at tp > 1, with tracing off (see the module docstring)."""
    begin = TRACE.clock()
    if TRACE.enabled:
        TRACE.complete("receive", "message", begin)
    if TRACE.enabled:
        TRACE.instant("schedule", "batch")
    with TRACE.span("forward", "batch", step=1, phase="decode", tokens=32):
        pass
    if TRACE.enabled:
        TRACE.instant("tokens", "batch")
    if TRACE.enabled:
        TRACE.instant("send", "message")


def main() -> None:
    assert not TRACE.enabled
    empty = per_call_ns("pass")
    rows = {
        "if TRACE.enabled: ...": per_call_ns("if TRACE.enabled:\n    TRACE.instant('x', 'batch')"),
        "TRACE.instant(name, cat, uid=3)": per_call_ns("TRACE.instant('handle', 'message', uid=3)"),
        "with TRACE.span(name, cat, step=1):": per_call_ns("with TRACE.span('forward', 'batch', step=1):\n    pass"),
        "TRACE.clock()": per_call_ns("TRACE.clock()"),
    }
    glob = {"step_hooks": step_hooks}
    step = min(timeit.repeat("step_hooks()", repeat=5, number=CALLS // 10, globals=glob)) / (CALLS // 10) * 1e9
    print(f"tracing off; an empty loop iteration costs {empty:.1f} ns (subtracted below)")
    for name, ns in rows.items():
        print(f"  {name:40s} {ns - empty:7.1f} ns")
    print(f"  {'all hooks of one scheduler step':40s} {step - empty:7.1f} ns")


if __name__ == "__main__":
    main()
