"""The precision settings resolved once, where the engine runs (chapter 16, "The precision probe"):
`dtype`, `quantization`, `max_quantized_rows`, `matmul_dtype` and `kv_cache_dtype` leave here named,
with no "auto" left, and a combination that cannot run fails here with one line naming the fix.

On CUDA "auto" is bf16. On a CPU it is measured: the CPU plug-in's probe times this model's
matmuls in every form this CPU has and picks the fastest (minisgl/cpu/precision.py, cached on disk).
Every rank must run the same choice, and does by construction: only world rank 0 calls
`resolve_precision`, and the engine hands its result to every rank over the gloo CPU group
(`same_on_every_rank`): no rank probes on its own. Across machines (--nnodes > 1)
"auto" is fp32 without a probe: node 0's CPU says nothing about the others'.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import torch
import torch.distributed as dist

from minisgl.config import EngineConfig
from minisgl.cpu.kernels import cpu_kernels
from minisgl.cpu.precision import BF16_MATMULS, cached_probe, choose_precision, describe
from minisgl.cpu.prepacked import bf16_prepacking_available
from minisgl.distributed import broadcast_json
from minisgl.models.config import ModelConfig
from minisgl.models.gguf_weights import find_model_gguf

logger = logging.getLogger(__name__)


def resolve_precision(config: EngineConfig) -> EngineConfig:
    """`config` with explicit dtype, quantization, max_quantized_rows, matmul_dtype and kv_cache_dtype
    ("auto" measured on a CPU)."""
    check_precision(config)
    return _resolve(config)


def same_on_every_rank(config: EngineConfig, world: dist.ProcessGroup | None) -> EngineConfig:
    """`config` with world rank 0's precision: ranks that chose apart could not add their partial sums."""
    if world is None:
        return config
    names = ("dtype", "matmul_dtype", "kv_cache_dtype", "quantization", "max_quantized_rows")
    return dataclasses.replace(config, **broadcast_json({n: getattr(config, n) for n in names}, world))


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype of a resolved dtype name."""
    dtypes = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
              "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}
    if name not in dtypes:
        raise ValueError(f"unknown dtype {name!r}; use auto, float32, bfloat16 or float16")
    return dtypes[name]


def check_precision(config: EngineConfig) -> None:
    """Refuse, with the fix, a combination of precision settings that cannot run."""
    device, quantization = config.device, config.quantization
    if quantization not in ("auto", "none", "gguf"):
        raise ValueError(f"unknown quantization {quantization!r}; use auto, none or gguf")
    if quantization == "gguf" and device != "cpu":
        raise ValueError("--quantization gguf runs on the CPU only (its 4-bit kernels are CPU kernels); "
                         "use none on CUDA")
    if quantization == "gguf" and config.load_format == "dummy":
        raise ValueError("--load-format dummy has no GGUF to quantize from; use --quantization none")
    if config.deterministic and device != "cpu":
        raise ValueError("--deterministic is implemented for the CPU (fixed-tile torch kernels); drop it on CUDA")
    if config.tp_ops is not None and (quantization == "gguf" or config.deterministic):
        raise ValueError("custom tp_ops (the capstone) run dense weights their own way; "
                         "drop quantization='gguf' and deterministic=True")
    if config.matmul_dtype not in ("auto", config.dtype):  # the same as dtype: what a resolved config holds
        if config.matmul_dtype not in ("float32", "bfloat16"):
            raise ValueError(f"unknown matmul_dtype {config.matmul_dtype!r}; use auto, float32 or bfloat16")
        if device != "cpu" or config.dtype != "float32" or config.deterministic:
            raise ValueError(f"matmul_dtype {config.matmul_dtype} means {config.matmul_dtype} matmuls under fp32 "
                             "activations on a CPU: use it with dtype float32, without --deterministic (or set dtype "
                             "bfloat16 for bf16 throughout)")
        if config.matmul_dtype == "bfloat16" and not bf16_prepacking_available():
            raise ValueError("this CPU's oneDNN has no bf16 matmuls for prepacked weights (they need AVX512-BW/VL/DQ "
                             "or AVX-NE-CONVERT); use matmul_dtype float32")


def _resolve(config: EngineConfig) -> EngineConfig:
    """The resolved fields: explicit values pass, "auto" asks the (cached) probe on a CPU."""
    # the capstone's own TP steps take dense weights, in their own matmuls
    quantization = "none" if config.tp_ops is not None else config.quantization
    config = _resolve_dtype(config, quantization)
    # the KV cache: the model's dtype, or bf16 under fp32 activations, which the CPU's attention reads
    # (the GPU kernels take the KV cache in q's dtype)
    if config.kv_cache_dtype not in ("auto", "bfloat16", config.dtype):
        raise ValueError(f"unknown kv_cache_dtype {config.kv_cache_dtype!r}; use auto or bfloat16")
    if config.kv_cache_dtype == "bfloat16" and config.dtype != "bfloat16" and config.device != "cpu":
        raise ValueError("kv_cache_dtype bfloat16 under float32 activations runs on the CPU only; on CUDA use "
                         "dtype bfloat16, whose KV cache is bf16 already")
    kv_cache_dtype = config.dtype if config.kv_cache_dtype == "auto" else config.kv_cache_dtype
    config = dataclasses.replace(config, kv_cache_dtype=kv_cache_dtype)
    if config.matmul_dtype == "auto" or config.deterministic:  # deterministic: fixed-tile matmuls in dtype
        config = dataclasses.replace(config, matmul_dtype=config.dtype)
    if config.deterministic and config.quantization == "gguf":
        # the int4 / int8 kernels compute each row on its own, whatever the batch: keep them for every batch,
        # since switching to the dense copy above max_quantized_rows would depend on the batch size
        config = dataclasses.replace(config, max_quantized_rows=None)
    return config


def _resolve_dtype(config: EngineConfig, quantization: str) -> EngineConfig:
    """dtype, quantization, max_quantized_rows (and matmul_dtype, where the probe picks it)."""
    if config.device == "cuda" or (config.dtype != "auto" and quantization != "gguf"):
        dtype = "bfloat16" if config.dtype == "auto" else config.dtype
        return dataclasses.replace(config, dtype=dtype, quantization="none", max_quantized_rows=None)
    if config.nnodes > 1 and quantization != "gguf":  # a probe on each machine could choose differently
        dtype = "float32" if config.dtype == "auto" else config.dtype
        return dataclasses.replace(config, dtype=dtype, quantization="none", max_quantized_rows=None)
    model = ModelConfig.from_dir(config.model_path)
    has_gguf = config.load_format != "dummy" and find_model_gguf(Path(config.model_path)) is not None
    if quantization == "gguf" and not has_gguf:
        raise ValueError(f"--quantization gguf reads a *.gguf file next to the checkpoint, and "
                         f"'{config.model_path}' has none; use --quantization none")
    if quantization == "gguf" and model.num_experts:
        raise ValueError("--quantization gguf reads dense Llama-style GGUF layers, not a mixture of experts; "
                         "use --quantization none")
    rows_known = config.max_quantized_rows is not None or config.deterministic  # deterministic: every batch
    if quantization == "gguf" and config.dtype != "auto" and rows_known:
        return config  # nothing left to measure
    threads = config.rank_cpu_threads  # what each rank will run with
    # the dense form a user named, or "auto"; bf16 matmuls are a form of their own only under fp32 activations
    named = BF16_MATMULS if (config.dtype, config.matmul_dtype) == ("float32", "bfloat16") else config.dtype
    choice = choose_precision(cached_probe(model, config.tp_info.size, threads),
                              dtype=None if named == "auto" else named,
                              allow_quantized=has_gguf and quantization != "none" and not model.num_experts,
                              fp32_kernels=cpu_kernels() is not None)
    logger.info("dtype %s on this CPU: %s (%s)", config.dtype, describe(choice), choice.why)
    if quantization == "gguf" and choice.quantization != "gguf":  # asked for: use it where it is fastest
        choice = dataclasses.replace(choice, quantization="gguf", max_quantized_rows=1)
    max_rows = config.max_quantized_rows if config.max_quantized_rows is not None else choice.max_quantized_rows
    matmul_dtype = choice.matmul_dtype if config.matmul_dtype == "auto" else config.matmul_dtype
    return dataclasses.replace(config, dtype=choice.dtype, quantization=choice.quantization,
                               max_quantized_rows=max_rows, matmul_dtype=matmul_dtype)
