"""Attention backends: one interface (`prepare` a batch once, `forward` per layer), several engines.
The torch backend runs on any device; faster ones plug in behind the same two calls."""

from .base import AttentionBackend, create_attention_backend
from .torch_backend import TorchAttentionBackend

__all__ = ["AttentionBackend", "TorchAttentionBackend", "create_attention_backend"]
