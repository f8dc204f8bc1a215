"""Attention backends: one interface (`AttentionBackend`: `prepare` a batch once, `forward` per layer,
plus the CUDA-graph hooks), several implementations (chapters 07 and 10). The torch backend runs on
any device; the Triton and FlashInfer backends plug in behind the same calls on CUDA."""

from .base import AttentionBackend, create_attention_backend
from .torch_backend import TorchAttentionBackend

__all__ = ["AttentionBackend", "TorchAttentionBackend", "create_attention_backend"]
