"""RMSNorm, with the residual add fused in: `x + residual` is both normalized and carried on
(chapter 07). The arithmetic is the device's kernel table's (kernels.py)."""

from __future__ import annotations

import torch

from .base import BaseOP
from .kernels import kernels_for


class RMSNorm(BaseOP):
    """y = x / sqrt(mean(x^2) + eps) * weight, over the last dim (replicated on every rank)."""

    def __init__(self, hidden_size: int, eps: float) -> None:
        self.eps = eps
        self.weight = torch.empty(hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return kernels_for(x).rms_norm(x, self.weight, self.eps)[0]

    def forward_with_residual(
        self, x: torch.Tensor, residual: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Add the residual stream first (when there is one), then normalize; return both."""
        return kernels_for(x).rms_norm(x, self.weight, self.eps, residual)
