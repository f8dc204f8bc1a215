"""The jobs a sandboxed worker runs for the grader: call a learner's function on inputs the grader
sent, and report what came back and what was seen on the way.

No job computes an expected value or compares anything: the grader does that, outside. What a job
adds beside the return value is observation - the collectives made (collectives.py), which inputs
changed, whether a result is a view of an input, which full tensors a loader kept alive, how a
radix tree looks afterwards - all of it sent as data.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable

from . import learner
from .collectives import Recorder
from .wire import decode, encode

MAX_TREE_NODES = 10_000


@dataclass
class Context:
    """What a job knows about the rank it runs on."""

    rank: int
    world_size: int
    device: Any  # torch.device
    groups: dict[str, Any]  # "WORLD", "cpu", "side", "half" -> process group (absent in a one-process worker)
    recorder: Recorder
    roots: dict[str, str]  # folder -> the name it is shown under in tracebacks
    log: str  # this rank's log: what its code and the processes it started printed
    trees: list[Any] = field(default_factory=list)  # radix trees built from this job's arguments
    notes: dict[str, int] = field(default_factory=dict)  # counts a job reports even when the call raised

    def group(self, name: str) -> Any:
        """A group by name; "strided" (the ranks of this rank's parity: {0, 2} and {1, 3} at world
        size 4) is made the first time a job asks for it, on every rank at once (jobs run on all)."""
        if name == "strided" and name not in self.groups and self.world_size > 1:
            import torch.distributed as dist

            for parity in (0, 1):
                made = dist.new_group(list(range(parity, self.world_size, 2)), backend="gloo")
                if self.rank % 2 == parity:
                    self.groups[name] = made
                    self.recorder.name_group(name, made)
        return self.groups[name]

    def resolve(self, tag: str, payload: Any) -> Any:
        """The grader's stand-ins in a job's arguments."""
        if tag == "group":
            return self.group(payload)
        if tag == "device":
            return self.device
        if tag == "model_config":
            from minisgl.models.config import ModelConfig

            return ModelConfig.from_dict(decode(payload))
        if tag == "tree":
            tree = tree_from_data(payload)
            self.trees.append(tree)
            return tree
        raise ValueError(f"unknown stand-in {tag!r}")


@contextmanager
def tp_view(tp: list[int] | None) -> Iterator[None]:
    """Let this process see itself as rank tp[0] of tp[1] (e.g. tp = 1 inside a 2-rank pool)."""
    if tp is None:
        yield
        return
    from minisgl.distributed import get_tp_info, set_tp_info

    before = get_tp_info()
    set_tp_info(*tp)
    try:
        yield
    finally:
        set_tp_info(before.rank, before.size)


def _to_device(value: Any, device: Any) -> Any:
    import torch

    return value.to(device) if isinstance(value, torch.Tensor) else value


def _strided(tensor: Any) -> Any:
    """`tensor`'s values in a non-contiguous layout (every element a stride of 2 apart)."""
    spread = tensor.new_zeros(*tensor.shape, 2)
    spread[..., 0] = tensor
    return spread[..., 0]


def _shares_memory(result: Any, inputs: list[Any]) -> bool:
    import torch

    if not isinstance(result, torch.Tensor):
        return False
    pointer = result.untyped_storage().data_ptr()
    return any(isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() == pointer for t in inputs)


def _devices(value: Any) -> list[str]:
    """The device type of each tensor in the result (itself, or the items of a tuple or list)."""
    import torch

    items = value if isinstance(value, (tuple, list)) else [value]
    return [t.device.type for t in items if isinstance(t, torch.Tensor)]


def _snapshot(args: list[Any]) -> list[Any]:
    """Each argument as data (trees aside: they are reported whole after the call)."""
    return [None if type(a).__name__ == "RadixTree" else encode(a) for a in args]


def call(ctx: Context, request: dict) -> dict:
    """`module:function(*args)`, at the tp view asked for; the result with what the call changed."""
    fn = learner.function(request["module"], request["function"])
    args = decode(request["args"], ctx.resolve)
    if request.get("on_device"):
        args = [_to_device(a, ctx.device) for a in args]
    for index in request.get("strided") or ():  # the same values in memory that is not contiguous
        args[index] = _strided(args[index])
    before = _snapshot(args) if request.get("watch") else None
    with tp_view(request.get("tp")), ctx.recorder.learner_calls():
        value = fn(*args)
    reply: dict[str, Any] = {"value": encode(value)}
    if before is not None:
        reply["changed"] = [i for i, (old, new) in enumerate(zip(before, _snapshot(args))) if old != new]
    if request.get("alias"):
        reply["aliased"] = _shares_memory(value, args)
    reply["devices"] = _devices(value)
    if ctx.trees:
        reply["trees"] = [tree_data(tree) for tree in ctx.trees]
        if request.get("append_to_result") and isinstance(value, list):
            value.append(-1)  # what the scheduler does next: its own pages follow
            reply["trees_after_append"] = [tree_data(tree) for tree in ctx.trees]
    return reply


# ---- chapter 04: a streamed checkpoint, watched with weak references -----------------------------
class Stream:
    """The checkpoint read one fresh tensor at a time, each watched by a weak reference."""

    def __init__(self, items: list[tuple[str, Any]]) -> None:
        self.items = items
        self.read = 0
        self.refs: list[tuple[str, Any]] = []
        self.kept_alive: str | None = None  # the first full tensor still alive two reads later

    def __iter__(self) -> Iterator[tuple[str, Any]]:
        for name, tensor in self.items:
            # tensor i - 1 may still sit in the loader's loop variable; every one before it must be gone
            self.note_alive(self.refs[:-1])
            self.read += 1
            yield self._fresh(name, tensor)  # no local keeps it

    def _fresh(self, name: str, tensor: Any) -> tuple[str, Any]:
        import weakref

        copy = tensor.clone()
        self.refs.append((name, weakref.ref(copy)))
        return name, copy

    def note_alive(self, refs: list[tuple[str, Any]]) -> None:
        alive = [name for name, ref in refs if ref() is not None]
        if alive and self.kept_alive is None:
            self.kept_alive = alive[0]


def stream(ctx: Context, request: dict) -> dict:
    """The learner's shard_and_merge over a checkpoint streamed in the order given: each output with
    how many tensors had been read when it came, and the first full tensor kept alive too long."""
    fn = learner.function("ch04_weight_sharding", "shard_and_merge")
    items = decode(request["checkpoint"])
    rank, tp_size, config = request["rank"], request["tp_size"], ctx.resolve("model_config", request["config"])
    source = Stream([(name, tensor) for name, tensor in items])
    del items
    with ctx.recorder.learner_calls():
        loader = fn(iter(source), rank, tp_size, config)
        got = [(name, tensor, source.read - 1) for name, tensor in loader]
    del loader  # the finished generator lets go of its last tensor
    source.note_alive(source.refs)  # what is still alive now is kept by the results: views of full tensors
    return {"value": encode(got), "kept_alive": source.kept_alive}


# ---- chapter 02: a launcher, with rank bodies that ack when told --------------------------------
def launch(ctx: Context, request: dict) -> dict:
    """The learner's start_ranks with the grader's rank bodies; what it returned, summarised, and the
    processes stopped whatever happened."""
    from multiprocessing.context import SpawnProcess
    from multiprocessing.process import BaseProcess

    from . import targets

    fn = learner.function("ch02_launch", "start_ranks")
    options = decode(request["target"])
    target = functools.partial(targets.behave, **options)
    processes: Any = None
    start = BaseProcess.start
    ctx.notes["started"] = 0

    def counted_start(process: BaseProcess) -> None:  # how many ranks the call started, raise or not
        ctx.notes["started"] += 1
        start(process)

    BaseProcess.start = counted_start  # type: ignore[method-assign]
    try:
        with ctx.recorder.learner_calls():
            processes = fn(target, request["world_size"], request["timeout_s"])
        if isinstance(processes, (list, tuple)):
            summary = encode([{"pid": getattr(p, "pid", None) if type(getattr(p, "pid", None)) is int else None,
                               "spawn": isinstance(p, SpawnProcess), "alive": _alive(p)} for p in processes])
        else:
            summary = encode(processes)
    finally:
        BaseProcess.start = start  # type: ignore[method-assign]
        _stop(processes)
    return {"value": summary, "started": ctx.notes["started"]}


def _alive(process: Any) -> bool:
    try:
        return bool(process.is_alive())
    except Exception:  # noqa: BLE001 - not a process
        return False


def _stop(processes: Any) -> None:
    for process in processes if isinstance(processes, (list, tuple)) else ():
        try:
            process.kill()
            process.join(1.0)
        except Exception:  # noqa: BLE001 - not a process, or not started
            pass


# ---- chapter 03: one unique id, made by the group's rank 0 ----------------------------------------
def unique_id(ctx: Context, request: dict) -> dict:
    """The learner's broadcast_unique_id with a create_id that returns this rank's own id (each rank
    has a different one, so an id from the wrong rank shows) and counts its calls."""
    fn = learner.function("ch03_communication_init", "broadcast_unique_id")
    mine, calls = decode(request["my_id"]), []

    def create_id() -> bytes:
        calls.append(1)
        return mine

    with ctx.recorder.learner_calls():
        got = fn(create_id, ctx.group(request["group"]))
    return {"value": encode(got), "calls": len(calls)}


# ---- chapter 06: scheduler steps through the engine's ZmqIO ---------------------------------------
def receive(ctx: Context, request: dict) -> dict:
    """Every step through the learner's receive_step on a real ZmqIO; only the group's rank 0 was
    sent the payloads."""
    import torch.distributed as dist

    from minisgl.distributed import DistributedInfo
    from minisgl.message import IpcAddresses
    from minisgl.scheduler.io import ZmqIO

    fn = learner.function("ch06_rank0_broadcast", "receive_step")
    group = ctx.group(request["group"])
    tp_info = DistributedInfo(dist.get_rank(group), dist.get_world_size(group))
    where = os.path.join(request["ipc_dir"], f"group{dist.get_global_rank(group, 0)}")  # one set of sockets per group
    os.makedirs(where, exist_ok=True)
    io = ZmqIO(tp_info, group, IpcAddresses.in_dir(where))
    try:
        got, modified = [], False
        for step in decode(request["steps"]):
            pulled = list(step)
            with ctx.recorder.learner_calls():
                got.append(fn(io, pulled))
            modified = modified or pulled != list(step)
        return {"value": encode(got), "modified": modified}
    finally:
        io.close()


# ---- chapter 11: radix trees as data --------------------------------------------------------------
def tree_from_data(data: dict) -> Any:
    """A RadixTree built from the grader's description, without calling any of its methods."""
    from minisgl.kvcache.radix_tree import RadixNode, RadixTree

    tree = RadixTree(decode(data["page_size"]))
    made: list[Any] = []
    for node_id, key, pages, parent, lock_ref, last_access, _ in data["nodes"]:
        node = RadixNode(decode(key), decode(pages), made[parent] if 0 <= parent < len(made) else None, decode(node_id))
        node.lock_ref, node.last_access = decode(lock_ref), decode(last_access)
        made.append(node)
    for node, (*_, children) in zip(made, data["nodes"]):
        node.children = {decode(first): made[child] for first, child in children}
    tree.root = made[0]
    tree.clock, tree.num_pages = decode(data["clock"]), decode(data["num_pages"])
    tree.num_evictable = decode(data["num_evictable"])
    tree._ids = itertools.count(1 + max((node.id for node in made if type(node.id) is int), default=0))
    return tree


def tree_data(tree: Any) -> dict:
    """Everything a test looks at in a tree, as data: the nodes reachable from the root through the
    children dicts (as the learner left them), each once, with its parent as the learner set it."""
    index: dict[int, int] = {}
    order: list[Any] = []
    stack = [tree.root]
    while stack and len(order) < MAX_TREE_NODES:
        node = stack.pop()
        if id(node) in index:
            continue
        index[id(node)] = len(order)
        order.append(node)
        stack.extend(getattr(node, "children", {}).values())
    nodes = []
    for node in order:
        children = [[encode(first), index.get(id(child), -2)] for first, child in getattr(node, "children", {}).items()]
        parent = getattr(node, "parent", None)
        nodes.append([encode(getattr(node, "id", None)), encode(getattr(node, "key", None)),
                      encode(getattr(node, "pages", None)), -1 if parent is None else index.get(id(parent), -2),
                      encode(getattr(node, "lock_ref", None)), encode(getattr(node, "last_access", None)), children])
    return {"page_size": encode(tree.page_size), "clock": encode(tree.clock), "num_pages": encode(tree.num_pages),
            "num_evictable": encode(tree.num_evictable), "nodes": nodes, "truncated": bool(stack)}


# ---- chapter 15: the engine serving with the learner's tensor parallelism -------------------------
def capstone(ctx: Context, request: dict) -> dict:
    """Greedy tokens of the real engine running the learner's TP steps, with how often the engine's
    ranks called each step ({"tokens", "calls"}), or the first step that is still a stub."""
    from multiprocessing.sharedctypes import RawArray

    from minisgl import LLM, SamplingParams
    from minisgl.models.config import ModelConfig

    from .tpops import STEPS, LearnerTPOps, unfinished

    model_dir = request["model_dir"]
    todo = unfinished(learner.PACKAGE, ModelConfig.from_dir(model_dir))
    if todo:
        return {"value": None, "unfinished": todo}
    calls = RawArray("q", len(STEPS))  # made after the probes above: it counts the engine's calls only
    params = SamplingParams(temperature=0, max_tokens=request["new_tokens"], ignore_eos=True)
    try:
        with LLM(model_dir, tp_size=request["tp"], dtype="float32", num_pages=256, progress=False,
                 tp_ops=LearnerTPOps(calls=calls)) as llm:
            tokens = [list(out.token_ids) for out in llm.generate(request["prompts"], params)]
    except NotImplementedError:
        raise
    except Exception as error:  # noqa: BLE001 - told with what the engine's ranks said before they stopped
        raise RuntimeError(f"{type(error).__name__}: {error}{_rank_errors(ctx.log)}") from None
    return {"value": encode({"tokens": tokens, "calls": dict(zip(STEPS, calls))})}


def _rank_errors(log: str) -> str:
    """The engine's ranks print why they stopped to this worker's log; read here, in the sandbox,
    and sent as part of the error (the grader reads no file a worker could have replaced)."""
    try:
        with open(log, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 20_000))
            text = f.read(20_000).decode(errors="replace")
    except OSError:
        return ""
    lines = [line.strip() for line in text.splitlines() if "stopped:" in line or "failed to start" in line]
    return ("; ranks said: " + " | ".join(lines[-3:])) if lines else ""


# ---- many points of a contract in one round trip ----------------------------------------------
class BatchStopped(Exception):
    """A job of a batch sent with `stop_on_error` raised: the batch ends with that job's error."""

    def __init__(self, reply: dict) -> None:
        super().__init__()
        self.reply = reply


def batch(ctx: Context, request: dict) -> dict:
    """Each job of request["jobs"] in turn, each replied to as `run` replies to one job (its own
    collectives included). The replies travel as one JSON string, which the grader checks reply by
    reply as it checks any reply. One that raises does not stop the others, unless the batch says
    `stop_on_error`: then the batch ends with that error, its label first ("V=5, tp=4: ..."), so a
    rank that raised never joins the next job's collectives while the other ranks are still in this
    job's."""
    replies = []
    for job in request["jobs"]:
        if job.get("job") == "batch":
            continue
        replies.append(_one(ctx, job))
        if replies[-1]["kind"] == "error" and request.get("stop_on_error"):
            error = dict(replies[-1]["error"])
            if type(job.get("label")) is str:
                error["message"] = f"{job['label'][:400]}: {error['message']}"
            raise BatchStopped({**replies[-1], "error": error})
    return {"value": json.dumps(replies)}


JOBS: dict[str, Callable[[Context, dict], dict]] = {
    "call": call, "stream": stream, "launch": launch, "unique_id": unique_id, "receive": receive,
    "capstone": capstone, "batch": batch,
}


def _one(ctx: Context, request: dict) -> dict:
    start = len(ctx.recorder.log)
    ctx.trees, ctx.notes = [], {}
    try:
        reply = {"kind": "ok", **JOBS[request["job"]](ctx, request)}
    except BatchStopped as stopped:
        return {**stopped.reply, "collectives": ctx.recorder.log[start:]}
    except BaseException as error:  # noqa: BLE001 - SystemExit included: the learner's code ended the call
        reply = {"kind": "error", "error": learner.describe(error, ctx.roots), "notes": ctx.notes}
    reply["collectives"] = ctx.recorder.log[start:]
    return reply


def run(ctx: Context, request: dict) -> dict:
    """One job: {"kind": "ok", ...} or {"kind": "error", "error": ...}, with the collectives made."""
    ctx.recorder.start_job()
    return _one(ctx, request)

