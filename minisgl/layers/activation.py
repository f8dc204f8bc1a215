"""SiLU-and-multiply: the SwiGLU activation applied to the fused gate_up output (chapter 07; one
Triton kernel on CUDA, chapter 10; one C function on an fp32 CPU run, minisgl/kernel/cpu/fused.c)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from minisgl.kernel import cpu_kernels, use_cpu_kernels, use_triton


def silu_and_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """[tokens, 2 * local_intermediate] -> [tokens, local_intermediate]: silu(gate) * up."""
    if use_triton(gate_up):
        from minisgl.kernel.triton.fused import silu_and_mul as fused_silu_and_mul

        return fused_silu_and_mul(gate_up)
    if use_cpu_kernels(gate_up):
        return cpu_kernels().silu_and_mul(gate_up)
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up
