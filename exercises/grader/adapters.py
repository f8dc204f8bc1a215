"""The one seam between the tests and an implementation (CS336-style `adapters.py`).

Tests never import a learner module, and neither does this process: each typed function below
describes a call (module, function, arguments as data) and runs it in the sandbox, in the pool of
workers of the task it grades (sandbox.py), where the engine's own code for the course's tasks is
cut out of minisgl (off_limits.py). What comes back is data; a single-process call's exception is
raised here rebuilt (a learner's ValueError is still a ValueError), a multi-rank job's results are
`RankResult`s (ranks.py).

`impl` is the spec `--impl` resolves: `exercises` (default), `solutions`, a package directory (the
grader's self-test points it at mutated copies of `solutions/`) or an importable package name.
"""

from __future__ import annotations

import importlib.util
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import quiz
from .child import wire
from .child.jobs import tree_data
from .outcomes import ImplementationError, NotAttempted, WrongAnswer
from .ranks import Collective, RankResult, run, run_one

REPO_ROOT = Path(__file__).resolve().parents[2]
NAMED_IMPLS = {"exercises": REPO_ROOT / "exercises", "solutions": REPO_ROOT / "solutions"}

CH00, CH01, CH02, CH03 = "ch00_getting_started", "ch01_tp_first_principles", "ch02_launch", "ch03_communication_init"
CH04, CH05, CH06 = "ch04_weight_sharding", "ch05_vocab_parallelism", "ch06_rank0_broadcast"
CH07, CH09 = "ch07_tp_decoder_layer", "ch09_communication_volume"
CH11, CH12, CH13 = "ch11_kv_memory", "ch12_beyond_one_machine", "ch13_pipeline_parallelism"
CH14 = "ch14_experts_across_ranks"

RANK_SUM, COLUMN, ROW = "00-getting-started/rank-sum", "01-tp-first-principles/column-forward", \
    "01-tp-first-principles/row-forward"
LAUNCH, UNIQUE_ID = "02-launch/start-ranks", "03-communication-init/unique-id"
QKV, RULES = "04-weight-sharding/qkv-gqa", "04-weight-sharding/shard-rules"
MERGE = "04-weight-sharding/shard-then-merge"
EMBEDDING, LM_HEAD = "05-vocab-parallelism/vocab-embedding", "05-vocab-parallelism/lm-head"
RECEIVE, MLP = "06-rank0-broadcast/receive-step", "07-tp-decoder-layer/tp-mlp"
SHAPES = "07-tp-decoder-layer/local-shapes"
VOLUME, MATCH, EVICT = "09-communication-volume/comm-volume", "11-kv-memory/match", "11-kv-memory/evict"
LAYOUT, DISPATCH = "12-beyond-one-machine/node-layout", "12-beyond-one-machine/dp-dispatch"
SPLIT, WEIGHTS = "13-pipeline-parallelism/stage-split", "13-pipeline-parallelism/stage-weights"
PLAN, CAPSTONE = "14-experts-across-ranks/dispatch-plan", "15-capstone/serve"


def resolve_impl(spec: str) -> str:
    """A canonical spec: the absolute folder of the implementation's files."""
    if spec in NAMED_IMPLS:
        if not NAMED_IMPLS[spec].is_dir():
            raise ImplementationError(f"--impl {spec}: this copy of the course has no {spec}/ folder (a student "
                                      "release ships without the answers); grade your own work with --impl exercises")
        return str(NAMED_IMPLS[spec])
    path = Path(spec)
    if path.is_dir():
        return str(path.resolve())
    if "/" in spec or spec.startswith(".") or "." in spec:
        raise ImplementationError(f"--impl {spec!r} is not a directory; pass exercises, solutions, a package dir "
                                  "or a top-level package name")
    found = importlib.util.find_spec(spec)  # a top-level name: found without running the package
    if found is None or not found.submodule_search_locations:
        raise ImplementationError(f"--impl {spec!r}: no such package directory or package")
    return str(Path(next(iter(found.submodule_search_locations))).resolve())


# ---- the grader's stand-ins in a call's arguments ------------------------------------------------
@dataclass(frozen=True)
class Group:
    """One of the process groups every rank has: "WORLD", "cpu", "side" (all ranks), "half", and
    "strided" (the ranks of this rank's parity, made when first asked for)."""

    name: str


def groups_of(world_size: int) -> list[str]:
    """The groups a world of this size can hand out: strided ones need 4 ranks ({0}, {1} at 2 are halves)."""
    return ["side", "half"] + (["strided"] if world_size >= 4 else [])


def group_members(rank: int, world_size: int, group: str) -> list[int]:
    """The global ranks of `rank`'s group, in group-rank order."""
    if group == "side":
        return list(range(world_size))
    if group == "half":
        half = world_size // 2
        return list(range(half)) if rank < half else list(range(half, world_size))
    return list(range(rank % 2, world_size, 2))


@dataclass(frozen=True)
class Device:
    """This rank's device."""


@dataclass(frozen=True)
class ModelConfig:
    """A minisgl ModelConfig, built in the worker from a Hugging Face config dict."""

    raw: dict


@dataclass(frozen=True)
class Tree:
    """A radix tree, built in the worker from its description (child/jobs.py: tree_data)."""

    data: dict


def _stand_in(value: Any) -> dict | None:
    if isinstance(value, Group):
        return {"$": "group", "v": value.name}
    if isinstance(value, Device):
        return {"$": "device"}
    if isinstance(value, ModelConfig):
        return {"$": "model_config", "v": wire.encode(value.raw)}
    if isinstance(value, Tree):
        return {"$": "tree", "v": value.data}
    return None


@dataclass(frozen=True)
class Request:
    """One rank's share of a job: which task's pool runs it, and what to send."""

    task: str
    body: dict


def call(task: str, module: str, function: str, *args: Any, tp: tuple[int, int] | None = None,
         on_device: bool = False, watch: bool = False, alias: bool = False, append_to_result: bool = False,
         strided: tuple[int, ...] = ()) -> Request:
    """`module.function(*args)` in the worker; `tp` sets the rank's view (rank, size) for the call,
    `on_device` moves tensor arguments to the rank's device, `watch` reports the arguments the call
    changed, `alias` whether the result is a view of one, `strided` the tensor arguments (by index)
    handed over in non-contiguous memory."""
    return Request(task, {"job": "call", "module": module, "function": function,
                          "args": wire.encode(list(args), _stand_in), "tp": list(tp) if tp else None,
                          "on_device": on_device, "watch": watch, "alias": alias,
                          "append_to_result": append_to_result, "strided": list(strided)})


def noncontiguous(request: Request, *indices: int) -> Request:
    """`request` with the tensor arguments at `indices` handed over in non-contiguous memory."""
    return Request(request.task, {**request.body, "strided": list(indices)})


def batch(requests: list[Request], labels: list[str] | None = None, stop_on_error: bool = False) -> Request:
    """Many requests of one task as one job (one round trip): run in order, each replied to on its
    own, a raise included (`unbatch` splits the result); with `stop_on_error` the first raise ends
    the job as that error, led by its label (what the test calls that point)."""
    tasks = {r.task for r in requests}
    assert len(tasks) == 1, f"one batch is one task's, got {tasks}"
    jobs = [r.body if labels is None else {**r.body, "label": label} for r, label in zip(requests, labels or requests)]
    return Request(tasks.pop(), {"job": "batch", "jobs": jobs, "stop_on_error": stop_on_error})


def unbatch(result: RankResult) -> list[RankResult]:
    """A batch's result, one RankResult per request (`.error` set where the learner's call raised),
    each reply checked as the sandbox checks any reply; WrongAnswer when they cannot be read."""
    from .sandbox import MalformedReply, check_reply

    try:
        replies = [check_reply(reply) for reply in json.loads(result.value)] \
            if isinstance(result.value, str) else None
    except (MalformedReply, ValueError, RecursionError) as error:
        replies, why = None, str(error)[:200]
    else:
        why = "not a list of replies"
    if replies is None:
        raise WrongAnswer(f"a worker's batch of replies could not be read ({why}); the grader sends its results "
                          "itself: does your code print to, or close, a file it did not open?")
    results = []
    for reply in replies:
        collectives = [Collective(*c) for c in reply.collectives]
        if reply.kind == "error":
            results.append(RankResult(None, collectives, error=reply.fields["error"]))
            continue
        fields = dict(reply.fields)
        value = fields.pop("value")
        results.append(RankResult(value, collectives, fields.pop("changed", []), fields.pop("aliased", False), fields))
    return results


def on_ranks_batched(impl: str, requests: list[list[Request]], labels: list[str] | None = None,
                     expect_errors: bool = False, timeout_s: float | None = None) -> list[list[RankResult]]:
    """requests[r]: the calls rank r makes, in order (every rank the same number); result[i][r]:
    rank r's result of its i-th call. Calls that must return (the default) stop a rank's batch at
    its first raise, which fails the job with that error, labelled by `labels[i]`: a rank that goes
    on would meet the others in the wrong collective. With `expect_errors` (calls that must raise
    before any collective) every call runs and `.error` says what each raised."""
    jobs = [batch(calls, labels, stop_on_error=not expect_errors) for calls in requests]
    per_rank = [unbatch(result) for result in on_ranks(impl, jobs, timeout_s)]
    if len({len(results) for results in per_rank}) != 1 or len(per_rank[0]) != len(requests[0]):
        raise WrongAnswer("a worker sent back fewer replies than it was sent calls")
    _not_attempted([r for results in per_rank for r in results])
    return [list(results) for results in zip(*per_rank)]


def _not_attempted(results: list[RankResult]) -> None:
    """Every call of a batch raised NotImplementedError: the task is not attempted yet."""
    if results and all(r.error is not None and r.error["not_implemented"] for r in results):
        raise NotAttempted(f"still raises NotImplementedError (in all {len(results)} calls)")


def one_batched(impl: str, requests: list[Request], timeout_s: float | None = None) -> list[RankResult]:
    """`requests` in their task's one-process worker, in one round trip; one result per request."""
    results = unbatch(run_one(impl, requests[0].task, batch(requests).body, timeout_s))
    if len(results) != len(requests):
        raise WrongAnswer("the worker sent back fewer replies than it was sent calls")
    _not_attempted(results)
    return results


def on_ranks(impl: str, requests: list[Request], timeout_s: float | None = None,
             allow_errors: bool = False) -> list[RankResult]:
    """Request r on rank r of the task's pool of len(requests) ranks, all at once."""
    tasks = {r.task for r in requests}
    assert len(tasks) == 1, f"one job is one task's, got {tasks}"
    return run(impl, tasks.pop(), [r.body for r in requests], timeout_s, allow_errors)


def _value(impl: str, request: Request, timeout_s: float | None = None) -> Any:
    return run_one(impl, request.task, request.body, timeout_s).value


# ---- chapter 00 --------------------------------------------------------------------------------
def rank_sum(tp: tuple[int, int]) -> Request:
    return call(RANK_SUM, CH00, "rank_sum", Device(), tp=tp)


# ---- chapter 01 --------------------------------------------------------------------------------
def column_parallel_forward(x: Any, weight_shard: Any, bias_shard: Any, tp: tuple[int, int] = (0, 1)) -> Request:
    return call(COLUMN, CH01, "column_parallel_forward", x, weight_shard, bias_shard, tp=tp, on_device=True,
                watch=True)


def row_parallel_forward(x_local: Any, weight_shard: Any, bias: Any, tp: tuple[int, int] = (0, 1)) -> Request:
    return call(ROW, CH01, "row_parallel_forward", x_local, weight_shard, bias, tp=tp, on_device=True, watch=True)


def value(impl: str, request: Request) -> Any:
    """Run one request in its task's one-process worker; its value (the learner's exception raised)."""
    return _value(impl, request)


# ---- chapter 02 --------------------------------------------------------------------------------
def start_ranks(impl: str, target: dict[str, Any], world_size: int, timeout_s: float,
                job_timeout_s: float) -> tuple[RankResult, float]:
    """The learner's start_ranks with the grader's rank bodies (child/targets.py `behave` with the
    options `target`); (what it returned, summarised, and the seconds the call took seen from here)."""
    request = Request(LAUNCH, {"job": "launch", "target": wire.encode(target), "world_size": world_size,
                               "timeout_s": timeout_s})
    start = time.monotonic()
    try:
        result = run_one(impl, LAUNCH, request.body, job_timeout_s)
    except Exception as error:  # noqa: BLE001 - the test judges what was raised, and when
        error.seconds = time.monotonic() - start  # type: ignore[attr-defined]
        raise
    return result, time.monotonic() - start


# ---- chapter 03 --------------------------------------------------------------------------------
def broadcast_unique_id(my_id: bytes, group: str) -> Request:
    """The learner's broadcast_unique_id on `group`; this rank's create_id returns `my_id`."""
    return Request(UNIQUE_ID, {"job": "unique_id", "my_id": wire.encode(my_id), "group": group})


# ---- chapter 04 --------------------------------------------------------------------------------
def kv_heads_call(rank: int, tp_size: int, num_kv_heads: int) -> Request:
    return call(QKV, CH04, "kv_heads_of_rank", rank, tp_size, num_kv_heads)


def shard_qkv_call(q: Any, k: Any, v: Any, rank: int, tp_size: int, num_heads: int, num_kv_heads: int,
                   head_dim: int) -> Request:
    return call(QKV, CH04, "shard_qkv", q, k, v, rank, tp_size, num_heads, num_kv_heads, head_dim, watch=True)


def shard_tensor_call(name: str, tensor: Any, rank: int, tp_size: int, config: dict) -> Request:
    return call(RULES, CH04, "shard_tensor", name, tensor, rank, tp_size, ModelConfig(config), watch=True, alias=True)


def shard_and_merge_call(tensors: list[tuple[str, Any]], rank: int, tp_size: int, config: dict) -> Request:
    """The learner's loader over `tensors` streamed in this order (see `shard_and_merge`)."""
    return Request(MERGE, {"job": "stream", "checkpoint": wire.encode([list(item) for item in tensors]),
                           "rank": rank, "tp_size": tp_size, "config": wire.encode(config)})


def kv_heads_of_rank(impl: str, rank: int, tp_size: int, num_kv_heads: int) -> Any:
    return _value(impl, call(QKV, CH04, "kv_heads_of_rank", rank, tp_size, num_kv_heads))


def shard_qkv(impl: str, q: Any, k: Any, v: Any, rank: int, tp_size: int, num_heads: int, num_kv_heads: int,
              head_dim: int) -> RankResult:
    return run_one(impl, QKV, call(QKV, CH04, "shard_qkv", q, k, v, rank, tp_size, num_heads, num_kv_heads,
                                   head_dim, watch=True).body)


def shard_tensor(impl: str, name: str, tensor: Any, rank: int, tp_size: int, config: dict) -> RankResult:
    return run_one(impl, RULES, call(RULES, CH04, "shard_tensor", name, tensor, rank, tp_size, ModelConfig(config),
                                     watch=True, alias=True).body)


def shard_and_merge(impl: str, tensors: list[tuple[str, Any]], rank: int, tp_size: int, config: dict) -> RankResult:
    """The learner's loader over `tensors` streamed in this order; value: (name, tensor, tensors read
    when it came) per output; extra["kept_alive"]: a full tensor kept alive too long, or absent."""
    body = {"job": "stream", "checkpoint": wire.encode([list(item) for item in tensors]), "rank": rank,
            "tp_size": tp_size, "config": wire.encode(config)}
    return run_one(impl, MERGE, body)


# ---- chapter 05 --------------------------------------------------------------------------------
def vocab_parallel_embedding(input_ids: Any, weight_shard: Any, vocab_size: int,
                             tp: tuple[int, int] = (0, 1)) -> Request:
    return call(EMBEDDING, CH05, "vocab_parallel_embedding", input_ids, weight_shard, vocab_size, tp=tp,
                on_device=True, watch=True)


def parallel_lm_head(hidden_states: Any, weight_shard: Any, vocab_size: int, tp: tuple[int, int] = (0, 1)) -> Request:
    return call(LM_HEAD, CH05, "parallel_lm_head", hidden_states, weight_shard, vocab_size, tp=tp, on_device=True,
                watch=True)


# ---- chapter 06 --------------------------------------------------------------------------------
def receive_step(ipc_dir: str, steps: list[list[bytes]], group: str) -> Request:
    """Every step through the learner's receive_step on a real ZmqIO over `group`; `steps` is what
    this rank pulled at each step ([] on every rank but the group's rank 0)."""
    return Request(RECEIVE, {"job": "receive", "ipc_dir": ipc_dir, "steps": wire.encode(steps), "group": group})


# ---- chapter 07 --------------------------------------------------------------------------------
def tp_mlp_forward(x: Any, gate: Any, up: Any, down: Any, tp: tuple[int, int]) -> Request:
    return call(MLP, CH07, "tp_mlp_forward", x, gate, up, down, tp=tp, on_device=True, watch=True)


def local_shapes(impl: str, hf_config: dict[str, Any], tp_size: int, dtype_bytes: int) -> Any:
    return _value(impl, call(SHAPES, CH07, "local_shapes", hf_config, tp_size, dtype_bytes))


# ---- chapter 09 --------------------------------------------------------------------------------
def comm_volume(impl: str, function: str, *args: Any) -> Any:
    """Call one of chapter 09's calculator functions by name."""
    return _value(impl, call(VOLUME, CH09, function, *args))


# ---- chapter 11 --------------------------------------------------------------------------------
def match_prefix(impl: str, tree: Any, token_ids: list[int]) -> RankResult:
    """The learner's match_prefix on a copy of `tree` (an engine RadixTree built here); extra["trees"]:
    the tree after the call, extra["trees_after_append"]: after appending to the result."""
    return run_one(impl, MATCH, call(MATCH, CH11, "match_prefix", Tree(tree_data(tree)), token_ids,
                                     append_to_result=True).body)


def evict(impl: str, tree: Any, num_pages: int) -> RankResult:
    return run_one(impl, EVICT, call(EVICT, CH11, "evict", Tree(tree_data(tree)), num_pages).body)


# ---- chapter 12 --------------------------------------------------------------------------------
def node_layout(impl: str, tp_size: int, nnodes: int, node_rank: int, dp_size: int,
                gpus_per_node: int) -> Any:
    return _value(impl, call(LAYOUT, CH12, "node_layout", tp_size, nnodes, node_rank, dp_size, gpus_per_node))


def pick_replica(impl: str, policy: str, loads: list[int], num_sent: int) -> RankResult:
    return run_one(impl, DISPATCH, call(DISPATCH, CH12, "pick_replica", policy, loads, num_sent, watch=True).body)


# ---- chapter 13 --------------------------------------------------------------------------------
def split_layers(impl: str, num_layers: int, pp_size: int) -> Any:
    return _value(impl, call(SPLIT, CH13, "split_layers", num_layers, pp_size))


def stages_holding(impl: str, name: str, num_layers: int, pp_size: int, tie_word_embeddings: bool) -> Any:
    return _value(impl, call(WEIGHTS, CH13, "stages_holding", name, num_layers, pp_size, tie_word_embeddings))


# ---- chapter 14 --------------------------------------------------------------------------------
def dispatch_plan(impl: str, topk_ids: Any, expert_rank: Any, num_ranks: int, on_device: bool = False) -> RankResult:
    """`on_device`: the tensors on the worker's device (a GPU where there is one); extra["devices"]
    says where the results are."""
    return run_one(impl, PLAN, call(PLAN, CH14, "dispatch_plan", topk_ids, expert_rank, num_ranks, watch=True,
                                    on_device=on_device).body)


# ---- chapter 15 --------------------------------------------------------------------------------
def capstone(impl: str, model_dir: str, tp: int, prompts: list[list[int]], new_tokens: int,
             timeout_s: float) -> RankResult:
    """The real engine at `tp` serving the checkpoint in `model_dir` with the learner's TP steps:
    value, {"tokens": the greedy tokens per prompt, "calls": step -> how often the engine's ranks called
    it}; extra["unfinished"], the first step still a stub."""
    body = {"job": "capstone", "model_dir": model_dir, "tp": tp, "prompts": prompts, "new_tokens": new_tokens}
    return run_one(impl, CAPSTONE, body, timeout_s)


# ---- quizzes -----------------------------------------------------------------------------------
def quiz_answer(impl: str, chapter: str, question: str) -> Any:
    """The value of `Q<n>` in `quizzes/ch<chapter>.py`, read as data (a missing name reads as not
    attempted); a file that is not only `Qn = <literal>` lines fails every question of it."""
    answers = quiz.answers(Path(impl) / "quizzes" / f"ch{chapter}.py")
    if isinstance(answers, str):
        raise WrongAnswer(f"quizzes/ch{chapter}.py: {answers}")
    if answers is None:
        raise NotAttempted(f"quizzes/ch{chapter}.py is missing; restore it from git")
    return answers.get(question)
