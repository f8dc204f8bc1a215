"""What of minisgl a task may not call while it is graded: the engine's own implementation of each
course task, as plain data ("module:Class.function" strings) that redact.py cuts out of the copy
of minisgl the sandboxed workers import. Calling one fails with a message that names it and says
why. Every task's docstring in exercises/ states what of minisgl it may use; none of them allows
another task's implementation, so every task is graded against one copy with all of them cut out.

The capstone (chapter 15) runs the whole engine, which needs most of those functions, so it gets
a copy of its own: only its five tensor-parallel steps are cut out there, the layers' own forwards
among them (`plug_in`, minisgl/models/tp_ops.py, gives the model's TP layers the learner's steps).

When the engine moves or renames a function, update its string here (tests/test_grader.py fails
until every entry names a function the engine has).
"""

from __future__ import annotations

LINEAR = "minisgl.layers.linear"
EMBEDDING = "minisgl.layers.embedding"
WEIGHT = "minisgl.models.weight"
PROCESS = "minisgl.process.group"
IO = "minisgl.scheduler.io"
RADIX = "minisgl.kvcache.radix_tree"

_COLUMN = (f"{LINEAR}:LinearBase.forward",)
_ROW = (f"{LINEAR}:RowParallelLinear.forward",)
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

CAPSTONE = "15-capstone/serve"

# task id -> "module:qualified.name" of every engine function that implements the task
OFF_LIMITS: dict[str, tuple[str, ...]] = {
    "01-tp-first-principles/column-forward": _COLUMN,
    "01-tp-first-principles/row-forward": _ROW + _COLUMN,
    "02-launch/start-ranks": (
        f"{PROCESS}:ChildGroup.spawn", f"{PROCESS}:ChildGroup.wait_ready", f"{PROCESS}:ChildGroup.check_alive",
        f"{PROCESS}:ChildGroup.stop", f"{PROCESS}:wait_for_acks", f"{PROCESS}:stop_processes",
        f"{PROCESS}:first_dead", "minisgl.testing.multiprocess:run_ranks",
    ),
    "03-communication-init/unique-id": ("minisgl.distributed.impl:broadcast_bytes",
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
    CAPSTONE: (f"{LINEAR}:LinearBase.forward", f"{LINEAR}:RowParallelLinear.forward",
               f"{EMBEDDING}:VocabParallelEmbedding.forward", f"{EMBEDDING}:ParallelLMHead.forward",
               f"{WEIGHT}:shard_tensor", f"{WEIGHT}:shard_and_merge"),
}
# Functions of the capstone's copy that keep their plug-in branch and lose the rest: none since the
# layers have no plug-in branch (issue 33: the capstone's steps replace their forwards after build).
PLUGGED_ONLY: dict[str, tuple[str, ...]] = {}


def message(entry: str, tasks: list[str]) -> str:
    module, _, qualname = entry.partition(":")
    return (f"calls {module}.{qualname.removesuffix('.fget')}, the engine's own code for {', '.join(tasks)}: off "
            "limits while your work is graded, since the point is to write it yourself; the task's docstring "
            "lists what of minisgl you may use")


def copy_entries(capstone: bool) -> tuple[dict[str, str], set[str]]:
    """("module:qualname" -> message, the plugged-only ones) for the tasks' copy or the capstone's."""
    owners: dict[str, list[str]] = {}
    for task, entries in OFF_LIMITS.items():
        if (task == CAPSTONE) == capstone:
            for entry in entries:
                owners.setdefault(entry, []).append(task)
    plugged = set(PLUGGED_ONLY.get(CAPSTONE, ())) if capstone else set()
    for entry in plugged:
        owners.setdefault(entry, []).append(CAPSTONE)
    return {entry: message(entry, tasks) for entry, tasks in owners.items()}, plugged
