"""The attention layer of one rank: split the fused qkv output, apply RoPE, and hand the local
heads to whichever attention backend the engine chose (torch, Triton, FlashInfer) (chapter 07).

No communication happens here: each rank attends with its own query heads and its own KV heads;
the following row-parallel o_proj does the all-reduce.
"""

from __future__ import annotations

import torch

from minisgl.core import get_forward_context

from .base import BaseOP
from .norm import RMSNorm
from .rotary import RotaryEmbedding


class AttentionLayer(BaseOP):
    """Attention over `local_q_heads` query heads and `local_kv_heads` KV heads of this rank."""

    def __init__(
        self,
        layer_id: int,
        local_q_heads: int,
        local_kv_heads: int,
        head_dim: int,
        rotary: RotaryEmbedding,
        q_norm: RMSNorm | None = None,
        k_norm: RMSNorm | None = None,
    ) -> None:
        self.layer_id = layer_id
        self.local_q_heads = local_q_heads
        self.local_kv_heads = local_kv_heads
        self.head_dim = head_dim
        self.scale = head_dim**-0.5
        self._rotary = rotary
        # Qwen3 normalizes each head of q and k before RoPE; the norms' weights belong to the caller.
        self._q_norm = q_norm
        self._k_norm = k_norm

    @property
    def rotary(self) -> RotaryEmbedding:
        """The RoPE this layer applies (private above: one object that every layer shares, not a child)."""
        return self._rotary

    def forward(self, qkv: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """qkv [tokens, (q_heads + 2 * kv_heads) * head_dim] -> [tokens, q_heads * head_dim]."""
        q_size = self.local_q_heads * self.head_dim
        kv_size = self.local_kv_heads * self.head_dim
        q, k, v = qkv.split([q_size, kv_size, kv_size], dim=-1)
        q = q.view(-1, self.local_q_heads, self.head_dim)  # [tokens, q_heads, head_dim]
        k = k.view(-1, self.local_kv_heads, self.head_dim)  # [tokens, kv_heads, head_dim]
        v = v.view(-1, self.local_kv_heads, self.head_dim)
        if self._q_norm is not None and self._k_norm is not None:
            q, k = self._q_norm.forward(q), self._k_norm.forward(k)
        q, k = self._rotary.forward(positions, q, k)
        ctx = get_forward_context()
        out = ctx.attn_backend.forward(q, k, v, self.layer_id, ctx.batch)  # [tokens, q_heads, head_dim]
        return out.reshape(-1, q_size)
