"""The probe behind `dtype="auto"` and `quantization="auto"` on a CPU (chapter 16, "The
precision probe"): CPUs differ too much to guess (an AVX2 laptop computes bf16 slower than fp32, an AMX Xeon many times
faster), so a short probe times the matmuls of one decode step at this model's real shapes, as fp32
and bf16 dense weights, as bf16 weights under fp32 activations, and as the GGUF's quantized weights
(4-bit linear layers, an 8-bit LM head), at a few batch sizes, and the engine takes the winner.
The probe times matmuls only; what it cannot see is one rule: where minisgl's C kernels are built,
"auto" keeps fp32 activations, because those kernels (norms, RoPE, attention, SiLU, the 4-bit
matmuls) and the CPU graphs replaying them take fp32 only, and with bf16 activations all of that
runs as eager PyTorch. On a CPU with fast bf16 (an AMX Xeon) it then takes bf16 for the dense
matmuls alone (prepacked.py). Measured there, 2 cores, SmolLM2, batch 1: 6.6 ms of matmuls either
way, but 23.8 ms per step with bf16 activations against 9.4 ms with fp32 ones.
The probe runs once per CPU model, torch version, thread count and model shape; its result is
cached under the minisgl cache dir, and `python -m minisgl.check_env` prints it. The engine asks it
once, on rank 0, and hands the choice to every rank (minisgl/engine/precision.py).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import platform
import statistics
import time
from dataclasses import dataclass

import torch

from minisgl.layers import local_kv_heads, vocab_shard_size
from minisgl.models.config import ModelConfig
from minisgl.utils import minisgl_cache_dir

from .prepacked import bf16_prepacking_available, dense_matmul_weight, matmuls_on_amx_tiles, prepacking_available
from .quantized import Int4Weight, PackedWeight, quantize_q8_0
from .table import CpuKernelTable

PROBE_ROWS = (1, 2, 4, 8, 16, 32)  # batch sizes (rows per matmul) the probe times
SCORE_ROWS = (1, 32)  # a single chat and a busy batch weigh equally in the choice
EVERY_BATCH = 1 << 30  # a candidate's "quantized up to this many rows" when it wins at every probed size
PROBE_BYTES = 64 << 20  # fp32 layer weights the probe streams per pass (one of every few layers)
MAX_EVICT_BYTES = 1 << 30  # the most the probe writes between passes to push its weights out of the caches
SAMPLES = 3  # the median of 3 passes, so one noisy pass (another process waking up) cannot decide
MIN_CPU_SHARE = 0.75  # below it the probe shared its cores with other work: its result is not cached
GIVE_UP_FACTOR = 3.0  # one pass this much slower than the best variant so far is enough to rule it out
DTYPE_NAMES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
BF16_MATMULS = "float32+bf16"  # the probe's name for fp32 activations multiplied by bf16 weights (prepacked.py)
PROBE_VERSION = 12  # bump when the measurement (or a kernel it times) changes, so old results are not reused

logger = logging.getLogger(__name__)
_MATMULS = CpuKernelTable(None, batch_invariant=False)  # the engine's matmuls for each weight form the probe times


@dataclass(frozen=True)
class Precision:
    """The resolved choice: weights and activations in `dtype`, dense matmuls in `matmul_dtype`; with
    quantization "gguf", the quantized weights for batches of at most `max_quantized_rows` rows
    (None: every batch)."""

    dtype: str
    matmul_dtype: str
    quantization: str
    max_quantized_rows: int | None
    why: str


@dataclass
class ProbeResult:
    key: dict[str, str | int]
    ms: dict[str, dict[int, float]]  # dense form or "int4" -> rows -> ms per decode step (all layers' linears)
    head_ms: dict[str, dict[int, float]]  # dense form or "int8" -> rows -> ms of the LM head matmul
    # a dense form: a dtype name (weights and activations), or BF16_MATMULS

    def step_ms(self, dense: str, quantized_rows: int | None, rows: int) -> float:
        """A decode step's matmuls at `rows` rows: quantized (4-bit linears, 8-bit head) up to
        `quantized_rows` rows, `dense` weights above."""
        if quantized_rows is not None and rows <= quantized_rows:
            return self.ms["int4"][rows] + self.head_ms["int8"][rows]
        return self.ms[dense][rows] + self.head_ms[dense][rows]


def choose_precision(probe: ProbeResult, dtype: str | None = None, allow_quantized: bool = True, *,
                     fp32_kernels: bool) -> Precision:
    """The variant whose decode step is fastest on geometric average over `SCORE_ROWS`, each batch
    size measured relative to its best variant. Quantized weights serve the batch sizes where they
    beat the dense weights (few rows: memory-bound), dense weights the rest; quantized weights that
    win at every probed size serve every batch, and the model keeps no dense copy. `dtype` is the
    dense form a user named (a dtype, or BF16_MATMULS for matmul_dtype bfloat16); None is "auto":
    with `fp32_kernels` (minisgl's C kernels, which take fp32 only, are built) activations stay
    fp32, the dense matmuls fp32 or bf16 (see the module's docstring)."""
    if dtype:
        dense_forms = [dtype]
    elif fp32_kernels:
        dense_forms = ["float32"] + [BF16_MATMULS] * (BF16_MATMULS in probe.ms)
    else:
        dense_forms = list(DTYPE_NAMES)
    candidates: list[tuple[str, int | None]] = []  # (dense form, quantized up to this many rows; None: dense)
    for name in dense_forms:
        candidates.append((name, None))
        wins_up_to = None  # the quantized kernels serve batches up to the first size where they lose
        for rows in PROBE_ROWS:
            if probe.step_ms(name, rows, rows) >= probe.step_ms(name, None, rows):
                break
            wins_up_to = rows
        if allow_quantized and wins_up_to is not None:
            candidates.append((name, EVERY_BATCH if wins_up_to == PROBE_ROWS[-1] else wins_up_to))
    best = {rows: min(probe.step_ms(n, r, rows) for n, r in candidates) for rows in SCORE_ROWS}

    def score(candidate: tuple[str, int | None]) -> float:
        ratios = [probe.step_ms(*candidate, rows) / best[rows] for rows in SCORE_ROWS]
        return math.prod(ratios) ** (1 / len(ratios))

    name, quantized_rows = min(candidates, key=score)  # ties keep the first: dense fp32 before the rest
    steps = ", ".join(f"{n}{'' if r is None else '+gguf' if r == EVERY_BATCH else f'+gguf<={r}'} "
                      + "/".join(f"{probe.step_ms(n, r, rows):.1f}" for rows in SCORE_ROWS)
                      for n, r in candidates)
    why = f"ms per decode step at batch {'/'.join(map(str, SCORE_ROWS))}: {steps}"
    dtype_name, matmul_dtype = ("float32", "bfloat16") if name == BF16_MATMULS else (name, name)
    if quantized_rows is None:
        return Precision(dtype_name, matmul_dtype, "none", None, why)
    return Precision(dtype_name, matmul_dtype, "gguf", None if quantized_rows == EVERY_BATCH else quantized_rows, why)


def describe(precision: Precision) -> str:
    """One line for check_env and the logs: what `auto` picked."""
    if precision.matmul_dtype != precision.dtype:
        on_tiles = matmuls_on_amx_tiles(DTYPE_NAMES[precision.matmul_dtype])
        layout = "AMX tiles, minisgl's kernel" if on_tiles else "prepacked for oneDNN"
        dense = f"{precision.matmul_dtype} weights under {precision.dtype} activations ({layout})"
    else:
        prepacked = precision.dtype == "float32" and prepacking_available()
        dense = f"{precision.dtype} weights{' (prepacked for oneDNN)' if prepacked else ''}"
    if precision.quantization == "none":
        return dense
    if precision.max_quantized_rows is None:
        return f"the GGUF's 4-/8-bit weights for every batch, {precision.dtype} activations"
    return f"{dense}, the GGUF's 4-/8-bit weights for batches of <= {precision.max_quantized_rows} rows"


def probe_key(model: ModelConfig, tp_size: int, threads: int) -> dict[str, str | int]:
    return {"cpu": cpu_name(), "torch": torch.__version__, "threads": threads, "tp": tp_size,
            "shape": f"{model.num_layers}x{model.hidden_size}x{model.intermediate_size}x{model.num_heads}x"
                     f"{model.num_kv_heads}x{model.head_dim}x{model.vocab_size}", "version": PROBE_VERSION}


def cached_probe(model: ModelConfig, tp_size: int, threads: int) -> ProbeResult:
    """The probe for this machine and model shape: from the cache, or measured now and cached, unless
    the machine was busy (the probe's threads got less than `MIN_CPU_SHARE` of their cores): a median
    cannot see through load that lasts the whole probe, so that measurement serves this start only."""
    key = probe_key(model, tp_size, threads)
    path = minisgl_cache_dir() / "probe" / (_slug(key) + ".json")
    if path.is_file():
        try:
            raw = json.loads(path.read_text())
            if raw["key"] == key:
                return ProbeResult(key, _int_keys(raw["ms"]), _int_keys(raw["head_ms"]))
        except (ValueError, KeyError):
            pass  # a damaged cache file is measured again and overwritten
    start_wall, start_cpu = time.perf_counter(), time.process_time()
    result = run_probe(model, tp_size, threads)
    share = cpu_share(start_wall, start_cpu, threads)
    if share < MIN_CPU_SHARE:
        logger.warning("dtype auto: the machine is busy (the probe got %.0f%% of %d cores), so this probe is not "
                       "cached; start again on a quiet machine for a lasting choice", 100 * share, threads)
        return result
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_suffix(f".{os.getpid()}.tmp")
    scratch.write_text(json.dumps(dataclasses.asdict(result), indent=1))
    scratch.replace(path)  # atomic: ranks or processes reading meanwhile see a whole file
    return result


def cpu_share(start_wall: float, start_cpu: float, threads: int) -> float:
    """CPU time this process got since (`time.perf_counter()`, `time.process_time()`) were
    `start_wall, start_cpu`, as a share of `threads` cores over that wall time. A load average lags
    by a minute; this sees exactly the seconds the probe ran. Measured on 2 cores: 0.88 alone, 0.62
    beside one busy process, 0.44 beside two."""
    wall = time.perf_counter() - start_wall
    return (time.process_time() - start_cpu) / max(wall * threads, 1e-9)


def run_probe(model: ModelConfig, tp_size: int, threads: int) -> ProbeResult:
    """Time one decode step's matmuls (one rank's shards) on random weights; a few seconds."""
    shapes = rank_linear_shapes(model, tp_size)  # [(out, in)] of one layer
    layer_bytes = 4 * sum(out * inp for out, inp in shapes)
    num_probe_layers = max(1, min(model.num_layers, math.ceil(PROBE_BYTES / layer_bytes)))
    scale = model.num_layers / num_probe_layers  # the probe runs fewer layers than the model has
    head_shape = (vocab_shard_size(model.vocab_size, tp_size), model.hidden_size)
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    generator = torch.Generator().manual_seed(0)
    try:
        ms: dict[str, dict[int, float]] = {}
        head_ms: dict[str, dict[int, float]] = {}
        evict = eviction_buffer()  # see _time_rows
        forms = [(name, dtype, dtype) for name, dtype in DTYPE_NAMES.items()]  # (name, activations, weights)
        if bf16_prepacking_available():
            forms.append((BF16_MATMULS, torch.float32, torch.bfloat16))
        for name, dtype, matmul_dtype in forms:
            weights = [_engine_form(torch.randn(s, generator=generator), dtype, matmul_dtype)
                       for s in shapes * num_probe_layers]
            ms[name] = _time_rows(weights, dtype, ms, scale, evict)
            head = _engine_form(torch.randn(head_shape, generator=generator), dtype, matmul_dtype)
            head_ms[name] = _time_rows([head], dtype, head_ms, 1.0, evict)
            del weights
        try:
            packed = [random_int4_weight(s, generator) for s in shapes * num_probe_layers]
            ms["int4"] = _time_rows(packed, torch.float32, ms, scale, evict)
            head = quantize_q8_0(torch.randn(head_shape, generator=generator), None, keep_dense=False)
            head_ms["int8"] = _time_rows([head], torch.float32, head_ms, 1.0, evict)
        except ValueError:  # shapes the kernels cannot take (their errors say which): never picked
            ms["int4"] = head_ms["int8"] = {rows: math.inf for rows in PROBE_ROWS}
    finally:
        torch.set_num_threads(previous_threads)
    return ProbeResult(probe_key(model, tp_size, threads), ms, head_ms)


def rank_linear_shapes(model: ModelConfig, tp_size: int) -> list[tuple[int, int]]:
    """(out, in) of one layer's qkv_proj, o_proj, gate_up_proj and down_proj on one rank."""
    q_size = model.num_heads // tp_size * model.head_dim
    kv_size = local_kv_heads(model.num_kv_heads, tp_size) * model.head_dim
    local_ffn = model.intermediate_size // tp_size
    return [(q_size + 2 * kv_size, model.hidden_size), (model.hidden_size, q_size),
            (2 * local_ffn, model.hidden_size), (model.hidden_size, local_ffn)]


def _engine_form(weight: torch.Tensor, dtype: torch.dtype, matmul_dtype: torch.dtype) -> torch.Tensor | PackedWeight:
    """An fp32 weight as the engine will hold it for `dtype` activations and `matmul_dtype` matmuls:
    under fp32 activations prepacked for oneDNN or as AMX tiles where it can be (prepacked.py)."""
    if dtype == torch.float32 and prepacking_available():
        return dense_matmul_weight(weight, keep_dense=False, matmul_dtype=matmul_dtype)
    return weight.to(dtype)


def random_int4_weight(shape: tuple[int, int], generator: torch.Generator) -> PackedWeight:
    """A random 4-bit weight of `shape` in the form the engine multiplies (minisgl's Q4_1 blocks
    where its kernels are built): what the probe and benchmark/cpu_matmuls.py time."""
    out_features, in_features = shape
    groups = max(1, in_features // 32)  # a partial group makes pack() refuse the shape, as it would the model
    codes = torch.randint(0, 16, shape, generator=generator, dtype=torch.uint8)
    weight = Int4Weight(codes, torch.rand(out_features, groups, generator=generator) * 0.01,
                        torch.rand(out_features, groups, generator=generator) * -0.05, 32)
    return weight.pack(torch.float32, None)


def _time_rows(weights: list, dtype: torch.dtype, others: dict[str, dict[int, float]],
               scale: float, evict: torch.Tensor) -> dict[int, float]:
    """Median ms of multiplying a batch by every weight, per batch size in PROBE_ROWS, times `scale`.
    The first pass is a warm-up (first-call allocations), unless it is already `GIVE_UP_FACTOR`
    times slower than the best of `others`: then that one pass is the result. Before each pass the
    probe writes `evict` (twice the last-level cache), so every pass reads its weights from memory
    as a whole model's decode step does: a few probe layers would otherwise sit in a large L3 (300
    MB on some Xeons) and make the wider formats look as cheap to read as the 4-bit ones."""
    result: dict[int, float] = {}
    for rows in PROBE_ROWS:
        inputs = {w.shape[1]: torch.randn(rows, w.shape[1]).to(dtype) for w in weights}  # by in_features
        best_other = min((times[rows] for times in others.values() if rows in times), default=math.inf)
        samples = []
        for _ in range(SAMPLES + 1):
            evict.fill_(0.0)
            start = time.perf_counter()
            for w in weights:
                _MATMULS.linear(inputs[w.shape[1]], w)
            samples.append((time.perf_counter() - start) * 1e3 * scale)
            if samples[0] > GIVE_UP_FACTOR * best_other:
                break
        result[rows] = statistics.median(samples[1:] or samples)
    return result


def eviction_buffer() -> torch.Tensor:
    """An fp32 buffer of twice the last-level cache (at most MAX_EVICT_BYTES): writing it pushes
    whatever a timed pass would otherwise find in cache back out to memory."""
    return torch.empty(min(2 * last_level_cache_bytes(), MAX_EVICT_BYTES) // 4)


def last_level_cache_bytes() -> int:
    """The largest CPU cache's size (Linux sysconf), or 64 MiB where the system does not say."""
    for name in ("SC_LEVEL3_CACHE_SIZE", "SC_LEVEL2_CACHE_SIZE"):
        try:
            size = os.sysconf(name)
        except (ValueError, OSError):
            continue
        if size > 0:
            return size
    return 64 << 20


def cpu_name() -> str:
    """The CPU's model name (e.g. "AMD EPYC 7763 64-Core Processor"), the probe cache's key."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _slug(key: dict[str, str | int]) -> str:
    text = "-".join(str(v) for v in key.values())
    return "".join(c if c.isalnum() or c in ".-" else "_" for c in text)[:200]


def _int_keys(table: dict[str, dict[str, float]]) -> dict[str, dict[int, float]]:
    return {name: {int(rows): ms for rows, ms in times.items()} for name, times in table.items()}
