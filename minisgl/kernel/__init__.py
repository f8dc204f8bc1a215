"""Device kernels: Triton attention, KV-store and fused elementwise kernels (`minisgl.kernel.triton`)
and the ctypes NCCL wrapper (`minisgl.kernel.pynccl`). Both import lazily: a CPU-only install never
loads them. Chapter 10 teaches the kernels, chapter 03 PyNCCL.
"""

from __future__ import annotations

import functools
import importlib.util

import torch


@functools.cache
def _has_triton() -> bool:
    return importlib.util.find_spec("triton") is not None


def use_triton(x: torch.Tensor) -> bool:
    """Layers take their fused Triton kernel for CUDA tensors when triton is installed; CPU tensors
    always take the plain torch code (the reference every kernel is tested against)."""
    return x.is_cuda and _has_triton()


# Up to 4 rows the Triton GEMV (plus the norm/SiLU kernel it saves) beats cuBLAS's GEMM on the
# SmolLM2 and Qwen3-0.6B shapes; from 8 rows on, cuBLAS wins (benchmark/gpu_gemv.py).
SMALL_BATCH_ROWS = 4


def use_small_batch_kernel(x: torch.Tensor) -> bool:
    """Linear layers take the Triton GEMV kernel (minisgl/kernel/triton/linear.py) for CUDA inputs
    of at most SMALL_BATCH_ROWS rows: decode batches, where the weight stream is the whole cost."""
    return use_triton(x) and x.dim() == 2 and x.shape[0] <= SMALL_BATCH_ROWS
