"""Device kernels: Triton attention, KV-store and fused elementwise kernels (`minisgl.kernel.triton`)
and the ctypes NCCL wrapper (`minisgl.kernel.pynccl`). Both import lazily: a CPU-only install never
loads them.
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
