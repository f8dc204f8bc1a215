"""The GPU speed plug-in (chapter 10): Triton kernels for attention, the KV store, the layers'
elementwise work, small-batch matmuls and mixture-of-experts GEMMs (`minisgl.kernel.triton`), and
`accelerate(model)`, which the engine calls once the model is built on CUDA: it installs CUDA's
kernel table and fuses the decode layer (cuda.py). Triton is imported only when a GPU path needs it,
so a CPU-only install never loads it.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from minisgl.layers import BaseOP

# Up to 4 rows the Triton GEMV (plus the norm/SiLU kernel it saves) beats cuBLAS's GEMM on the
# SmolLM2 and Qwen3-0.6B shapes; from 8 rows on, cuBLAS wins (benchmark/gpu_gemv.py).
SMALL_BATCH_ROWS = 4


def accelerate(model: BaseOP, fuse_decode_layers: bool) -> None:
    """Plug CUDA's Triton kernels into `model`, and with `fuse_decode_layers` its fused decode layers
    (cuda.py); without triton installed the layers keep running the torch reference
    (minisgl/layers/kernels.py)."""
    if importlib.util.find_spec("triton") is None:
        return
    from .cuda import accelerate_cuda

    accelerate_cuda(model, fuse_decode_layers)
