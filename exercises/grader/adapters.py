"""The one seam between the tests and an implementation (CS336-style `adapters.py`).

Tests never import a learner module: they call the typed functions below with an `impl` spec,
which `--impl` sets to `exercises` (default), `solutions`, a package directory (the grader's
self-test points it at mutated copies of `solutions/`) or an importable module name. The same spec
travels to spawned ranks, which resolve it the same way. Every call runs with the engine's own code
for that task off limits (off_limits.py) and logs the collectives it makes (collectives.py).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from .collectives import learner_calls
from .off_limits import off_limits, off_limits_stream
from .outcomes import ImplementationError

REPO_ROOT = Path(__file__).resolve().parents[2]
NAMED_IMPLS = {"exercises": REPO_ROOT / "exercises", "solutions": REPO_ROOT / "solutions"}

CH00, CH01, CH02, CH03 = "ch00_getting_started", "ch01_tp_first_principles", "ch02_launch", "ch03_communication_init"
CH04, CH05, CH06 = "ch04_weight_sharding", "ch05_vocab_parallelism", "ch06_rank0_broadcast"
CH07, CH09 = "ch07_tp_decoder_layer", "ch09_communication_volume"
CH11, CH12, CH13 = "ch11_kv_memory", "ch12_beyond_one_machine", "ch13_pipeline_parallelism"
CH14 = "ch14_experts_across_ranks"


def resolve_impl(spec: str) -> str:
    """A canonical spec: the absolute package directory, or a module name to import."""
    if spec in NAMED_IMPLS:
        if not NAMED_IMPLS[spec].is_dir():
            raise ImplementationError(f"--impl {spec}: this copy of the course has no {spec}/ folder (a student "
                                      "release ships without the answers); grade your own work with --impl exercises")
        return str(NAMED_IMPLS[spec])
    path = Path(spec)
    if path.is_dir():
        return str(path.resolve())
    if "/" in spec or spec.startswith("."):
        raise ImplementationError(f"--impl {spec!r} is not a directory; pass exercises, solutions, a package dir "
                                  "or a module")
    return spec


_PACKAGES: dict[str, ModuleType] = {}


def _package(impl: str) -> ModuleType:
    """Import the implementation package once per process (by path, under a private name)."""
    if impl in _PACKAGES:
        return _PACKAGES[impl]
    path = Path(impl)
    if path.is_dir():
        init = path / "__init__.py"
        if not init.is_file():
            raise ImplementationError(f"{path} has no __init__.py; an --impl directory must be a package")
        name = f"_minisgl_impl_{hashlib.sha1(impl.encode()).hexdigest()[:10]}"
        spec = importlib.util.spec_from_file_location(name, init, submodule_search_locations=[str(path)])
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    else:
        try:
            module = importlib.import_module(impl)
        except ModuleNotFoundError:
            raise ImplementationError(f"--impl {impl!r}: no such package directory or module") from None
    _PACKAGES[impl] = module
    return module


def load_module(impl: str, name: str) -> ModuleType:
    """The implementation's module `name` (e.g. `ch05_vocab_parallelism`, `quizzes.ch05`)."""
    package = _package(impl)
    try:
        return importlib.import_module(f"{package.__name__}.{name}")
    except ModuleNotFoundError as error:
        raise ImplementationError(f"{impl}: no module {name} ({error}); restore it from git") from None
    except SyntaxError as error:
        raise ImplementationError(f"{error.filename}:{error.lineno}: syntax error: {error.msg}") from None


def _task(impl: str, module: str, name: str) -> Callable[..., Any]:
    fn = getattr(load_module(impl, module), name, None)
    if not callable(fn):
        raise ImplementationError(f"{impl}/{module}.py has no function {name}(); restore its stub from git")
    return fn


def _call(task_id: str, impl: str, module: str, name: str, *args: Any) -> Any:
    """Run the learner's function with the engine's own code for `task_id` off limits, logging the
    collectives it makes (in a grader rank)."""
    fn = _task(impl, module, name)
    with off_limits(task_id), learner_calls():
        return fn(*args)


# ---- chapter 00 --------------------------------------------------------------------------------
def rank_sum(impl: str, device: Any) -> int:
    return _call("00-getting-started/rank-sum", impl, CH00, "rank_sum", device)


# ---- chapter 01 --------------------------------------------------------------------------------
def column_parallel_forward(impl: str, x: Any, weight_shard: Any, bias_shard: Any) -> Any:
    return _call("01-tp-first-principles/column-forward", impl, CH01, "column_parallel_forward", x, weight_shard,
                 bias_shard)


def row_parallel_forward(impl: str, x_local: Any, weight_shard: Any, bias: Any) -> Any:
    return _call("01-tp-first-principles/row-forward", impl, CH01, "row_parallel_forward", x_local, weight_shard, bias)


# ---- chapter 02 --------------------------------------------------------------------------------
def start_ranks(impl: str, target: Callable[..., None], world_size: int, timeout_s: float) -> list[Any]:
    return _call("02-launch/start-ranks", impl, CH02, "start_ranks", target, world_size, timeout_s)


# ---- chapter 03 --------------------------------------------------------------------------------
def broadcast_unique_id(impl: str, create_id: Callable[[], bytes], cpu_group: Any) -> bytes:
    return _call("03-communication-init/unique-id", impl, CH03, "broadcast_unique_id", create_id, cpu_group)


# ---- chapter 04 --------------------------------------------------------------------------------
def kv_heads_of_rank(impl: str, rank: int, tp_size: int, num_kv_heads: int) -> tuple[int, int]:
    return _call("04-weight-sharding/qkv-gqa", impl, CH04, "kv_heads_of_rank", rank, tp_size, num_kv_heads)


def shard_qkv(impl: str, q: Any, k: Any, v: Any, rank: int, tp_size: int,
              num_heads: int, num_kv_heads: int, head_dim: int) -> Any:
    return _call("04-weight-sharding/qkv-gqa", impl, CH04, "shard_qkv", q, k, v, rank, tp_size, num_heads,
                 num_kv_heads, head_dim)


def shard_tensor(impl: str, name: str, tensor: Any, rank: int, tp_size: int, config: Any) -> Any:
    return _call("04-weight-sharding/shard-rules", impl, CH04, "shard_tensor", name, tensor, rank, tp_size, config)


def shard_and_merge(impl: str, tensors: Iterable[tuple[str, Any]], rank: int, tp_size: int,
                    config: Any) -> Iterator[tuple[str, Any]]:
    """The learner's stream; the block is on while it computes each item (it is a generator)."""
    task = "04-weight-sharding/shard-then-merge"
    stream = _call(task, impl, CH04, "shard_and_merge", tensors, rank, tp_size, config)
    return off_limits_stream(task, iter(stream))


# ---- chapter 05 --------------------------------------------------------------------------------
def vocab_parallel_embedding(impl: str, input_ids: Any, weight_shard: Any, vocab_size: int) -> Any:
    return _call("05-vocab-parallelism/vocab-embedding", impl, CH05, "vocab_parallel_embedding", input_ids,
                 weight_shard, vocab_size)


def parallel_lm_head(impl: str, hidden_states: Any, weight_shard: Any, vocab_size: int) -> Any:
    return _call("05-vocab-parallelism/lm-head", impl, CH05, "parallel_lm_head", hidden_states, weight_shard,
                 vocab_size)


# ---- chapter 06 --------------------------------------------------------------------------------
def receive_step(impl: str, io: Any, pulled: list[bytes]) -> list[bytes]:
    return _call("06-rank0-broadcast/receive-step", impl, CH06, "receive_step", io, pulled)


# ---- chapter 07 --------------------------------------------------------------------------------
def tp_mlp_forward(impl: str, x: Any, gate: Any, up: Any, down: Any) -> Any:
    return _call("07-tp-decoder-layer/tp-mlp", impl, CH07, "tp_mlp_forward", x, gate, up, down)


def local_shapes(impl: str, hf_config: dict[str, Any], tp_size: int, dtype_bytes: int) -> dict[str, int]:
    return _call("07-tp-decoder-layer/local-shapes", impl, CH07, "local_shapes", hf_config, tp_size, dtype_bytes)


# ---- chapter 09 --------------------------------------------------------------------------------
def comm_volume(impl: str, function: str, *args: Any) -> Any:
    """Call one of chapter 09's calculator functions by name."""
    return _call("09-communication-volume/comm-volume", impl, CH09, function, *args)


# ---- chapter 11 --------------------------------------------------------------------------------
def match_prefix(impl: str, tree: Any, token_ids: list[int]) -> Any:
    return _call("11-kv-memory/match", impl, CH11, "match_prefix", tree, token_ids)


def evict(impl: str, tree: Any, num_pages: int) -> Any:
    return _call("11-kv-memory/evict", impl, CH11, "evict", tree, num_pages)


# ---- chapter 12 --------------------------------------------------------------------------------
def node_layout(impl: str, tp_size: int, nnodes: int, node_rank: int, dp_size: int,
                gpus_per_node: int) -> list[tuple[int, int, int]]:
    return _call("12-beyond-one-machine/node-layout", impl, CH12, "node_layout", tp_size, nnodes, node_rank, dp_size,
                 gpus_per_node)


def pick_replica(impl: str, policy: str, loads: list[int], num_sent: int) -> int:
    return _call("12-beyond-one-machine/dp-dispatch", impl, CH12, "pick_replica", policy, loads, num_sent)


# ---- chapter 13 --------------------------------------------------------------------------------
def split_layers(impl: str, num_layers: int, pp_size: int) -> list[tuple[int, int]]:
    return _call("13-pipeline-parallelism/stage-split", impl, CH13, "split_layers", num_layers, pp_size)


def stages_holding(impl: str, name: str, num_layers: int, pp_size: int, tie_word_embeddings: bool) -> list[int]:
    return _call("13-pipeline-parallelism/stage-weights", impl, CH13, "stages_holding", name, num_layers, pp_size,
                 tie_word_embeddings)


# ---- chapter 14 --------------------------------------------------------------------------------
def dispatch_plan(impl: str, topk_ids: Any, expert_rank: Any, num_ranks: int) -> Any:
    return _call("14-experts-across-ranks/dispatch-plan", impl, CH14, "dispatch_plan", topk_ids, expert_rank,
                 num_ranks)


# ---- quizzes -----------------------------------------------------------------------------------
def quiz_answer(impl: str, chapter: str, question: str) -> Any:
    """The value of `Q<n>` in `quizzes/ch<chapter>.py` (a missing name reads as not attempted)."""
    return getattr(load_module(impl, f"quizzes.ch{chapter}"), question, None)
