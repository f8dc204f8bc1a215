"""Kernels: on CUDA, Triton attention, KV-store and fused elementwise kernels (`minisgl.kernel.triton`),
imported lazily so a CPU-only install never loads them; on the CPU, minisgl's own C kernels
(`minisgl.kernel.cpu`: quantized GEMV, fused elementwise work, decode attention), compiled on first
use. Chapter 10 teaches the kernels, chapter 04 the quantized ones.
"""

from __future__ import annotations

import functools
import importlib.util

import torch

from .cpu import cpu_kernels


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


def use_cpu_kernels(x: torch.Tensor) -> bool:
    """Layers take minisgl's C kernels for fp32 CPU tensors when they could be built on this machine
    (kernel/cpu); otherwise, and for other dtypes, their plain torch code."""
    return x.device.type == "cpu" and x.dtype == torch.float32 and cpu_kernels() is not None
