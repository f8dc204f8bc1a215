"""Rotary position embedding (RoPE), rotate-half layout as in Hugging Face Llama/Qwen (chapter 07).

Positions come from the scheduler (prefix_len ... prefix_len + new_tokens - 1 for each request),
so a prompt split into chunks rotates exactly as it would in one piece. The rotation itself is the
device's kernel table's (kernels.py).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from .base import BaseOP
from .kernels import kernels_for

SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3")


def _inverse_frequencies(rotary_dim: int, base: float, scaling: dict[str, Any]) -> torch.Tensor:
    """One frequency per pair of dims [rotary_dim / 2], adjusted by the checkpoint's scaling rule."""
    inv_freq = 1.0 / (base ** (torch.arange(0, rotary_dim, 2, dtype=torch.float64, device="cpu") / rotary_dim))
    rope_type = scaling.get("rope_type", scaling.get("type", "default"))
    if rope_type == "default":
        return inv_freq
    if rope_type == "linear":
        return inv_freq / scaling["factor"]
    if rope_type == "llama3":
        # Llama 3.1: keep high frequencies, divide low ones by `factor`, blend in between.
        factor = scaling["factor"]
        low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
        old_context = scaling["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv_freq
        smooth = (old_context / wavelen - low) / (high - low)
        blended = (1 - smooth) * inv_freq / factor + smooth * inv_freq
        return torch.where(
            wavelen > old_context / low, inv_freq / factor, torch.where(wavelen < old_context / high, inv_freq, blended)
        )
    raise ValueError(f"unsupported rope_type {rope_type!r}; supported: {', '.join(SUPPORTED_ROPE_TYPES)}")


class RotaryEmbedding(BaseOP):
    """Rotates q and k by position. Tables live on the CPU at build time (the model is built on the
    meta device) and move to the input's device on first use."""

    def __init__(self, head_dim: int, max_position: int, base: float, scaling: dict[str, Any] | None) -> None:
        self.head_dim = head_dim
        self.max_position = max_position
        self._inv_freq = _inverse_frequencies(head_dim, base, scaling or {})
        self._cos_sin: torch.Tensor | None = None  # private: not a weight, rebuilt from config

    def cos_sin(self, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        """[max_position, head_dim] = [cos | sin] of every position's angles, on `device` in `dtype`."""
        if self._cos_sin is None or self._cos_sin.device != device or self._cos_sin.dtype != dtype:
            positions = torch.arange(self.max_position, dtype=torch.float64, device="cpu")
            angles = torch.outer(positions, self._inv_freq)  # [max_position, head_dim / 2]
            self._cos_sin = torch.cat([angles.cos(), angles.sin()], dim=-1).to(device, dtype)
        return self._cos_sin

    def forward(
        self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """q [tokens, q_heads, head_dim], k [tokens, kv_heads, head_dim] -> rotated copies."""
        return kernels_for(q).rope(positions, q, k, self.cos_sin(q.device, q.dtype))
