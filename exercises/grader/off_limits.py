"""What of minisgl a task may not call while it is graded: the engine's own implementation of that
very task. Calling it fails the task with a message that names the function and says why.

The block works on the function objects themselves, not on names: while a task runs, each listed
function's code is swapped for one that raises, so an alias imported earlier (`from
minisgl.models.weight import shard_tensor as st`) or a bound method is caught the same way. Every
task's docstring in exercises/ states what of minisgl it may use.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Iterator
from contextlib import contextmanager
from types import CodeType, FunctionType
from typing import TypeVar

T = TypeVar("T")

LINEAR = "minisgl.layers.linear"
EMBEDDING = "minisgl.layers.embedding"
WEIGHT = "minisgl.models.weight"
PROCESS = "minisgl.process.group"
IO = "minisgl.scheduler.io"
RADIX = "minisgl.kvcache.radix_tree"

_COLUMN = (f"{LINEAR}:_LinearBase.forward", f"{LINEAR}:_LinearBase.forward_rms_normed")
_ROW = (f"{LINEAR}:RowParallelLinear.forward", f"{LINEAR}:RowParallelLinear._sum_partials",
        f"{LINEAR}:RowParallelLinear.forward_silu_and_mul")
_KV_HEADS = (f"{LINEAR}:kv_head_offset", f"{LINEAR}:local_kv_heads")
_VOCAB_SHARD = (f"{EMBEDDING}:vocab_shard_size",)
_LOADER = (f"{WEIGHT}:shard_tensor", f"{WEIGHT}:shard_and_merge", f"{WEIGHT}:load_weights", f"{WEIGHT}:merged_name")
_LOCAL_SIZES = (  # constructors compute the local sizes; the config check names the valid tp sizes
    f"{LINEAR}:divide", f"{LINEAR}:ColumnParallelLinear.__init__", f"{LINEAR}:MergedColumnParallelLinear.__init__",
    f"{LINEAR}:QKVParallelLinear.__init__", f"{LINEAR}:RowParallelLinear.__init__",
    f"{EMBEDDING}:VocabParallelEmbedding.__init__", f"{EMBEDDING}:ParallelLMHead.__init__",
    "minisgl.models.config:ModelConfig.valid_tp_sizes", "minisgl.models.config:ModelConfig.check_tp_size",
    "minisgl.kvcache.page_pool:KVCachePool.bytes_per_token",
)
_STAGES = ("minisgl.models.stage:split_layers", "minisgl.models.stage:PipelineStage.of",
           "minisgl.config:check_pipeline")

# task id -> "module:qualified.name" of every engine function that implements the task
OFF_LIMITS: dict[str, tuple[str, ...]] = {
    "01-tp-first-principles/column-forward": _COLUMN,
    "01-tp-first-principles/row-forward": _ROW + _COLUMN,
    "02-launch/start-ranks": (
        f"{PROCESS}:ChildGroup.spawn", f"{PROCESS}:ChildGroup.wait_ready", f"{PROCESS}:ChildGroup.check_alive",
        f"{PROCESS}:ChildGroup.stop", f"{PROCESS}:wait_for_acks", f"{PROCESS}:stop_processes",
        f"{PROCESS}:first_dead", "minisgl.testing.multiprocess:run_ranks",
    ),
    "03-communication-init/unique-id": ("minisgl.distributed.control:broadcast_bytes",
                                        "minisgl.distributed.pynccl:PyNCCLCommunicator.__init__"),
    "04-weight-sharding/qkv-gqa": _KV_HEADS + _LOADER,
    "04-weight-sharding/shard-rules": _KV_HEADS + _LOADER + _VOCAB_SHARD,
    "04-weight-sharding/shard-then-merge": _KV_HEADS + _LOADER + _VOCAB_SHARD,
    "05-vocab-parallelism/vocab-embedding": (f"{EMBEDDING}:VocabParallelEmbedding.forward",) + _VOCAB_SHARD,
    "05-vocab-parallelism/lm-head": (f"{EMBEDDING}:ParallelLMHead.forward",) + _VOCAB_SHARD + _COLUMN,
    "06-rank0-broadcast/receive-step": (f"{IO}:ZmqIO.receive",),
    "07-tp-decoder-layer/tp-mlp": _COLUMN + _ROW + ("minisgl.models.llama:LlamaMLP.forward",),
    "07-tp-decoder-layer/local-shapes": _LOCAL_SIZES + _KV_HEADS + _VOCAB_SHARD,
    "11-kv-memory/match": (f"{RADIX}:RadixTree.match",),
    "11-kv-memory/evict": (f"{RADIX}:RadixTree.evict",),
    "12-beyond-one-machine/node-layout": (
        "minisgl.scheduler.process:spawn_ranks", "minisgl.scheduler.process:node_ranks",
        "minisgl.config:EngineConfig.local_rank.fget", "minisgl.config:EngineConfig.local_world_size.fget",
    ),
    "12-beyond-one-machine/dp-dispatch": (
        "minisgl.scheduler.data_parallel:pick_replica", "minisgl.scheduler.data_parallel:Dispatcher.assign",
    ),
    "13-pipeline-parallelism/stage-split": _STAGES,
    "13-pipeline-parallelism/stage-weights": _STAGES + ("minisgl.models.stage:PipelineStage.holds",),
    "14-experts-across-ranks/dispatch-plan": ("minisgl.layers.moe_dispatch:dispatch_plan",),
}

def resolve(path: str) -> FunctionType:
    """The function object behind "module:Class.name"; a grader bug (one line) if it has moved."""
    module_name, _, qualname = path.partition(":")
    target = importlib.import_module(module_name)
    for part in qualname.split("."):
        target = getattr(target, part, None)
    target = getattr(target, "__func__", target)  # a classmethod, got through its class
    if not isinstance(target, FunctionType):
        raise RuntimeError(f"grader: off-limits entry {path} is no longer a function in the engine; update "
                           "exercises/grader/off_limits.py")
    return target


@functools.cache  # one compile per function and task, however often the task is called
def _blocked_code(original: CodeType, message: str) -> CodeType:
    """Code that raises OffLimits(message), with as many free variables as `original` (a function's
    closure must fit its code: methods that use super() carry one)."""
    names = original.co_freevars
    source = (
        "def outer():\n"
        + "".join(f"    {name} = None\n" for name in names)
        + "    def blocked(*args, **kwargs):\n"
        + (f"        ({', '.join(names)},)\n" if names else "")
        + f"        raise __import__('exercises.grader.outcomes', fromlist=['OffLimits']).OffLimits({message!r})\n"
        + "    return blocked\n"
    )
    namespace: dict = {}
    exec(compile(source, "<off limits>", "exec"), namespace)  # noqa: S102 - our own fixed source
    return namespace["outer"]().__code__


def _message(task_id: str, path: str) -> str:
    module, _, qualname = path.partition(":")
    return (f"calls {module}.{qualname}, the engine's own code for this task ({task_id}): off limits while it is "
            "graded, since the point is to write it yourself; the task's docstring lists what of minisgl you may use")


@contextmanager
def off_limits(task_id: str) -> Iterator[None]:
    """While the body runs, every function listed for `task_id` raises OffLimits when called."""
    swapped = [(fn, fn.__code__) for fn in map(resolve, dict.fromkeys(OFF_LIMITS.get(task_id, ())))]
    for fn, code in swapped:
        fn.__code__ = _blocked_code(code, _message(task_id, f"{fn.__module__}:{fn.__qualname__}"))
    try:
        yield
    finally:
        for fn, code in reversed(swapped):
            fn.__code__ = code


def off_limits_stream(task_id: str, items: Iterator[T]) -> Iterator[T]:
    """`items`, a generator of the task's, with the block on while it computes each item and off
    while its consumer runs between items."""
    while True:
        with off_limits(task_id):
            try:
                item = next(items)
            except StopIteration:
                return
        yield item
