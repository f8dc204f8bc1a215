"""Programmatic dependent launch (PDL): let a kernel start while the one before it finishes
(chapter 10).

On a stream, kernel N+1 normally starts only after kernel N has fully finished, and then pays its
own launch and memory latency, a few microseconds, before doing useful work. A decode step of a
small model is ~250 kernels of a few microseconds each, so that gap is a large share of the step.
Hopper (sm_90) can launch kernel N+1 early, when every program of kernel N has signalled
`gdc_launch_dependents`; kernel N+1 then runs up to its `gdc_wait`, which blocks until kernel N has
finished and its writes are visible. What it runs before the wait must not depend on kernel N:
our small-batch linear kernel loads its weight tile there, so the weight stream overlaps the
previous kernel.

Every kernel launched this way waits before it exits, so "kernel N finished" still implies
"everything before kernel N finished": the ordering of the stream is kept, only the gaps shrink.
Kernels call both helpers with a constexpr flag (`pdl_launch_options` passes it with the launch),
which is False on GPUs before Hopper and in Triton's CPU interpreter (which has no inline assembly).
"""

from __future__ import annotations

import functools
import os

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from minisgl.kernel import SMALL_BATCH_ROWS


@functools.cache
def _device_supports_pdl(index: int) -> bool:
    return torch.cuda.get_device_capability(index)[0] >= 9


def use_pdl(x: torch.Tensor) -> bool:
    """Launch with PDL: a small batch (x [rows, ...], rows <= SMALL_BATCH_ROWS) of CUDA tensors on
    Hopper or newer, not in the interpreter, not switched off with MINISGL_DISABLE_PDL=1 (the A/B
    switch of benchmark/gpu_decode.py). At 64 rows the early programs, spinning on SMs until their
    turn, cost more than the launch gaps they hide (SmolLM2 shape: 1.21 vs 1.10 ms a step)."""
    if not x.is_cuda or x.shape[0] > SMALL_BATCH_ROWS:
        return False
    if os.environ.get("TRITON_INTERPRET") == "1" or os.environ.get("MINISGL_DISABLE_PDL") == "1":
        return False
    return _device_supports_pdl(x.device.index if x.device.index is not None else torch.cuda.current_device())


def pdl_launch_options(x: torch.Tensor) -> dict[str, bool]:
    """Keyword arguments for a launch: the kernel's USE_PDL constexpr and Triton's launch_pdl
    option, decided once so that they always agree."""
    enabled = use_pdl(x)
    return {"USE_PDL": enabled, "launch_pdl": enabled}


@triton.jit
def let_next_kernel_launch(USE_PDL: tl.constexpr):
    """Signal that the next kernel may start launching (it still waits for us in `wait_previous`)."""
    if USE_PDL:
        gdc_launch_dependents()


@triton.jit
def wait_previous_kernel(USE_PDL: tl.constexpr):
    """Block until the previous kernel has finished and its writes are visible."""
    if USE_PDL:
        gdc_wait()
