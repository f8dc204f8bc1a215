"""The objects every part of the engine shares: sampling parameters, requests, batches, and the
forward context that lets attention layers reach the current batch without threading it through
every layer's signature (chapter 07).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import torch

if TYPE_CHECKING:
    from minisgl.attention import AttentionBackend


@dataclass
class SamplingParams:
    """How to pick each next token. temperature 0 is greedy; top_k <= 0 and top_p 1 disable those filters."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    max_tokens: int = 128
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0 or self.top_k == 1


@dataclass(eq=False)  # identity: two requests are never "equal"
class Req:
    """One request inside a scheduler: its tokens, its KV pages, and how many of its tokens have
    their K/V in those pages. A retracted request keeps its output: the prompt plus the output so far
    are computed again when it is admitted again (chapter 11)."""

    uid: int
    input_ids: list[int]
    sampling: SamplingParams
    max_total_len: int  # prompt + tokens it may still generate, capped by the context length
    output_ids: list[int] = field(default_factory=list)
    pages: list[int] = field(default_factory=list)  # page table: borrowed prefix pages, then its own
    cached_len: int = 0  # tokens whose K/V are already in the pool
    generator: torch.Generator | None = None  # per-request RNG, so sampling is the same on every rank

    @property
    def all_ids(self) -> list[int]:
        return self.input_ids + self.output_ids

    @property
    def total_len(self) -> int:
        return len(self.input_ids) + len(self.output_ids)


@dataclass
class Batch:
    """What one forward pass computes: the new tokens of several requests, flattened.

    For request i with `prefix_lens[i]` tokens already cached and `extend_lens[i]` new tokens, the
    new tokens sit consecutively in `input_ids`; decode is the case extend_len = 1 for everyone.
    """

    phase: Literal["prefill", "decode"]
    reqs: list[Req]
    input_ids: torch.Tensor  # [num_tokens]
    positions: torch.Tensor  # [num_tokens]
    out_slots: torch.Tensor  # [num_tokens] KV-pool slot each new token's K/V is written to
    prefix_lens: list[int]
    extend_lens: list[int]
    last_indices: torch.Tensor  # [num_reqs] index in input_ids of each request's last new token
    attn_metadata: Any = None  # filled by the attention backend's prepare()

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def size(self) -> int:
        return len(self.reqs)

    @property
    def emits(self) -> list[bool]:
        """Whether row i yields a token: its new tokens reach the request's end. False only for a
        middle chunk of a prompt, whose logits are thrown away (read it before the scheduler moves
        `cached_len` on)."""
        return [p + e == r.total_len for r, p, e in zip(self.reqs, self.prefix_lens, self.extend_lens)]


@dataclass
class ForwardContext:
    """The batch being computed and the attention backend that computes its attention."""

    batch: Batch
    attn_backend: AttentionBackend


_CTX: ForwardContext | None = None


@contextmanager
def forward_context(batch: Batch, attn_backend: AttentionBackend) -> Iterator[ForwardContext]:
    global _CTX
    _CTX = ForwardContext(batch, attn_backend)
    try:
        yield _CTX
    finally:
        _CTX = None


def get_forward_context() -> ForwardContext:
    if _CTX is None:
        raise RuntimeError("attention called outside a forward pass: wrap it in forward_context()")
    return _CTX
