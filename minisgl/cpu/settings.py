"""The settings the CPU plug-in reads, as a protocol: `EngineConfig` (minisgl/config.py)
provides them, and declaring them here keeps this package below the engine that calls it."""

from __future__ import annotations

from typing import Any, Protocol


class CpuSettings(Protocol):
    """A resolved engine config (no "auto" left: minisgl/engine/precision.py), as far as the CPU
    plug-in reads it."""

    dtype: str  # activations and plain weights: "float32" or "bfloat16"
    matmul_dtype: str  # what dense matmuls multiply in (bf16 under fp32 activations: prepacked.py)
    quantization: str  # "gguf": the checkpoint's 4-bit weights (quantized.py), else "none"
    max_quantized_rows: int | None  # batches above it take the dense copy of a quantized weight
    deterministic: bool  # batch-invariant matmuls (batch_invariant.py)
    cpu_graph_max_bs: int | None  # graphs.py
    max_running_requests: int
    tp_ops: Any  # the capstone's TP steps (minisgl/models/tp_ops.py), which take plain weights

    @property
    def world_size(self) -> int: ...
