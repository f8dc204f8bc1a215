"""Chapter 09 (communication volume): how many bytes tensor parallelism moves per token.

All inputs are a Hugging Face config.json as a dict (num_hidden_layers, hidden_size, vocab_size).
Counting conventions of the chapter:
- one forward at tp > 1 runs 2 all-reduces per decoder layer (after o_proj and after down_proj)
  plus 1 after the vocab-parallel embedding, and 1 all-gather of the sampled positions' logits;
- an all-reduce's payload per token is one hidden vector: hidden_size * dtype_bytes;
- a ring all-reduce makes every rank send 2 (t - 1) / t times the payload (reduce-scatter, then
  all-gather); an all-gather of V logits leaves every rank receiving the (t - 1) / t it lacks.
Return plain numbers in bytes (not KiB). At tp = 1 nothing is communicated: 0 bytes.
Raise ValueError when tp_size < 1. May use: plain Python (the engine has no calculator).
"""

from __future__ import annotations

from typing import Any


def all_reduces_per_forward(hf_config: dict[str, Any]) -> int:
    """Task 09-communication-volume/comm-volume: all-reduces in one forward pass at tp > 1."""
    raise NotImplementedError("09-communication-volume/comm-volume")


def all_reduce_bytes_per_token(hf_config: dict[str, Any], dtype_bytes: int = 2) -> int:
    """Task 09-communication-volume/comm-volume: payload of one all-reduce, per token, in bytes."""
    raise NotImplementedError("09-communication-volume/comm-volume")


def ring_factor(tp_size: int) -> float:
    """Task 09-communication-volume/comm-volume: bytes each rank sends in a ring all-reduce, per
    byte of payload (0 at tp = 1: nothing to send)."""
    raise NotImplementedError("09-communication-volume/comm-volume")


def sent_bytes_per_rank_per_token(hf_config: dict[str, Any], tp_size: int, dtype_bytes: int = 2) -> float:
    """Task 09-communication-volume/comm-volume: bytes one rank sends for all of one forward's
    all-reduces, per token, with ring all-reduces."""
    raise NotImplementedError("09-communication-volume/comm-volume")


def logits_gather_bytes_per_rank(hf_config: dict[str, Any], tp_size: int, dtype_bytes: int = 2) -> float:
    """Task 09-communication-volume/comm-volume: bytes one rank receives in the logits all-gather,
    per sampled position."""
    raise NotImplementedError("09-communication-volume/comm-volume")
