"""The attention-backend interface and the factory that picks one by name."""

from __future__ import annotations

from typing import Protocol

import torch

from minisgl.core import Batch
from minisgl.kvcache import KVCachePool


class AttentionBackend(Protocol):
    def prepare(self, batch: Batch) -> None:
        """Build per-batch metadata (index tables, masks) once, before the layers run."""
        ...

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer_id: int, batch: Batch) -> torch.Tensor:
        """Store the new k, v in the pool, attend: q [tokens, q_heads, d] -> [tokens, q_heads, d]."""
        ...


def create_attention_backend(name: str, pool: KVCachePool, device: torch.device) -> AttentionBackend:
    if name == "torch":
        from .torch_backend import TorchAttentionBackend

        return TorchAttentionBackend(pool)
    raise ValueError(f"unknown attention backend {name!r}; available: torch")
