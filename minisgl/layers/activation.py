"""SiLU-and-multiply: the SwiGLU activation applied to the fused gate_up output."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def silu_and_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """[tokens, 2 * local_intermediate] -> [tokens, local_intermediate]: silu(gate) * up."""
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up
