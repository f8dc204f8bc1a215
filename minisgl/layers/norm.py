"""RMSNorm, with the residual add fused in: `x + residual` is both normalized and carried on
(chapter 07). On CUDA one Triton kernel does both (minisgl/kernel/triton/fused.py, chapter 10), on
an fp32 CPU run one C function (minisgl/kernel/cpu/fused.c)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from minisgl.kernel import cpu_kernels, use_cpu_kernels, use_triton

from .base import BaseOP


class RMSNorm(BaseOP):
    """y = x / sqrt(mean(x^2) + eps) * weight, over the last dim (replicated on every rank)."""

    def __init__(self, hidden_size: int, eps: float) -> None:
        self.eps = eps
        self.weight = torch.empty(hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if use_triton(x):
            from minisgl.kernel.triton.fused import rms_norm

            return rms_norm(x, self.weight, self.eps)[0]
        if use_cpu_kernels(x):
            return cpu_kernels().rms_norm(x, self.weight, self.eps)[0]
        # Normalize in fp32, round to the model dtype, then scale: the rounding order of Hugging
        # Face's Llama. In bf16 a fused norm-and-scale rounds once less, which is enough to flip a
        # close greedy choice (SmolLM2 then stops answering "Paris"). In fp32 the casts are no-ops.
        normed = F.rms_norm(x.float(), self.weight.shape, None, self.eps).to(x.dtype)
        return self.weight * normed

    def forward_with_residual(
        self, x: torch.Tensor, residual: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Add the residual stream first (when there is one), then normalize; return both."""
        if use_triton(x):
            from minisgl.kernel.triton.fused import rms_norm

            normed, summed = rms_norm(x, self.weight, self.eps, residual)
            return normed, x if summed is None else summed
        if use_cpu_kernels(x):
            normed, summed = cpu_kernels().rms_norm(x, self.weight, self.eps, residual)
            return normed, x if summed is None else summed
        residual = x if residual is None else x + residual
        return self.forward(residual), residual
