"""SiLU-and-multiply: the SwiGLU activation applied to the fused gate_up output (chapter 07), as
the device's kernel table computes it (kernels.py)."""

from __future__ import annotations

import torch

from .kernels import kernels_for


def silu_and_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """[tokens, 2 * local_intermediate] -> [tokens, local_intermediate]: silu(gate) * up."""
    return kernels_for(gate_up).silu_and_mul(gate_up)
