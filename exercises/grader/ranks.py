"""Jobs on real ranks, from the grader's side: send one request per rank to the task's pool of
sandboxed workers (sandbox.py), and turn what comes back into results a test checks - or into one
failure that says, rank by rank, what was raised, who hung where, and who never joined the
collective a stuck rank waits in.

Backends follow the course rule: gloo on CPU; NCCL when there is a GPU per rank; gloo on CUDA
tensors when several ranks share one GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from . import budget, sandbox
from .child.collectives import NOT_IN_A_COLLECTIVE, TORCH_COLLECTIVES
from .outcomes import NotAttempted, WrongAnswer, learner_error

STRIKES_BEFORE_SKIP = 2  # hangs of one task before its remaining tests are not run (the grade ends in time)
SHORT_TIMEOUT_S = 10.0  # a task that hung once gets this long per job afterwards


@dataclass(frozen=True)
class Collective:
    api: str  # "torch.distributed.broadcast" or "minisgl.distributed.all_reduce"
    group: str  # the job's name for the group ("WORLD", "cpu", "side", "half"), else "another group"
    dtype: str | None  # of the first tensor handed over
    device: str | None
    shape: str | None = None  # of that tensor, "2,11" ("" for a scalar)


@dataclass(frozen=True)
class RankResult:
    """One rank's answer: what the learner's function returned, the collectives it made, and what
    the worker saw (inputs it changed, a result that is a view of an input, job-specific fields)."""

    value: Any
    collectives: list[Collective]
    changed: list[int] = field(default_factory=list)  # indices of the arguments the call modified
    aliased: bool = False  # the result shares storage with an argument
    extra: dict[str, Any] = field(default_factory=dict)
    error: dict[str, Any] | None = None  # what the rank raised, when the test allows errors

    def count(self, api: str) -> int:
        return sum(c.api == api for c in self.collectives)


class RanksFailed(WrongAnswer):
    """Some rank raised or hung; the message has one line per rank."""


def choose_backend(world_size: int) -> tuple[str, str]:
    """(device type, tensor backend) for `world_size` ranks on this machine."""
    import torch

    if not torch.cuda.is_available():
        return "cpu", "gloo"
    return "cuda", "nccl" if torch.cuda.device_count() >= world_size else "gloo"


def describe(api_index: int) -> str:
    if 0 <= api_index < len(TORCH_COLLECTIVES):
        return f"torch.distributed.{TORCH_COLLECTIVES[api_index]}"
    return "an unknown collective"


def run(impl: str, task: str, requests: list[dict], timeout_s: float | None = None,
        allow_errors: bool = False) -> list[RankResult]:
    """Request r on rank r of (impl, task)'s pool of len(requests) workers. Every rank's result, or
    one exception for all: NotAttempted when every rank raised NotImplementedError, RanksFailed
    otherwise (with `allow_errors`, ranks that raised come back with `.error` set instead)."""
    box = sandbox.current()
    strikes = box.strikes.get((impl, task), 0)
    if strikes >= STRIKES_BEFORE_SKIP:
        raise RanksFailed(f"not run: your code for {task} hung {strikes} times already in this grade, so its "
                          "remaining tests are skipped (each would wait for the time limit)")
    limit = budget.job_limit(impl, task, timeout_s or box.job_timeout_s)
    if strikes:
        limit = min(limit, SHORT_TIMEOUT_S)
    outcome = box.pool(impl, task, len(requests)).run(requests, limit)
    if outcome.missing:
        box.strikes[(impl, task)] = strikes + 1
    results, errors = {}, {}
    for rank, reply in outcome.replies.items():
        collectives = [Collective(*c) for c in reply.collectives]
        if reply.kind == "error":
            errors[rank] = reply.fields["error"]
            results[rank] = RankResult(None, collectives, error=reply.fields["error"])
        else:
            fields = dict(reply.fields)
            value = fields.pop("value")
            fields["seconds"] = outcome.seconds
            results[rank] = RankResult(value, collectives, fields.pop("changed", []), fields.pop("aliased", False),
                                       fields)
    world_size = len(requests)
    if len(results) == world_size and (not errors or allow_errors):
        return [results[rank] for rank in range(world_size)]
    if world_size == 1 and errors:
        error = learner_error(errors[0])  # one process: the learner's own exception, for the test to judge
        error.seconds = outcome.seconds  # type: ignore[attr-defined]
        raise error
    if errors and len(errors) == world_size and all(e["not_implemented"] for e in errors.values()):
        raise NotAttempted(f"still raises NotImplementedError (on {len(errors)} of {world_size} ranks)")
    lines = [f"{len(errors) + len(outcome.missing) + len(outcome.malformed)} of {world_size} ranks failed"]
    for rank in sorted(errors):
        lines.append(f"  rank {rank} raised {errors[rank]['type']}: {errors[rank]['message']}")
        lines.extend("    " + line for line in errors[rank]["where"])
    for rank, why in sorted(outcome.malformed.items()):
        lines.append(f"  rank {rank}: {why}")  # what it printed stays in its log: the grader never reads it
    lines.extend(_hang_lines(outcome.missing, results, outcome.progress, limit))
    raise RanksFailed("\n".join(lines))


def _hang_lines(missing: list[int], returned: dict[int, RankResult], progress: list[tuple[int, int]],
                timeout_s: float) -> list[str]:
    """Who is stuck where, and which ranks never joined the collective a stuck rank waits in."""
    lines = []
    for rank in missing:
        entered, current = progress[rank]
        if current == NOT_IN_A_COLLECTIVE:
            where = f"outside any collective, after {entered} collective(s)"
        else:
            where = f"in its collective #{entered} ({describe(current)})"
        lines.append(f"  rank {rank} did not finish within {timeout_s:.0f} s: it waits {where}; the grader killed it")
    waited = max((progress[r][0] for r in missing if progress[r][1] != NOT_IN_A_COLLECTIVE), default=0)
    for rank in sorted(returned):
        if progress[rank][0] < waited:
            lines.append(f"  rank {rank} returned after {progress[rank][0]} collective(s): it never joined "
                         f"collective #{waited}, which the stuck rank(s) wait in")
    return lines


def run_one(impl: str, task: str, request: dict, timeout_s: float | None = None) -> RankResult:
    """`request` in (impl, task)'s one-process worker; the learner's exception is raised here."""
    return run(impl, task, [request], timeout_s)[0]
