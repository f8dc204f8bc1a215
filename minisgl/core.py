"""The objects every part of the engine shares: sampling parameters and the rules a request must
follow (checked once, here), requests, batches, and the forward context that lets attention
layers reach the current batch without threading it through every layer's signature (chapter 07).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Literal, Protocol

import torch

GREEDY_BELOW = 1e-5  # a temperature below this picks the most likely token (dividing by it would overflow)
MAX_TOKEN_ID = 2**31 - 1  # bound for token ids and counts: every value must fit the wire format (msgpack)
MAX_SEED = 2**63 - 1
MAX_PENALTY = 2.0  # OpenAI's range for frequency_penalty and presence_penalty: [-2, 2]
MAX_LOGIT_BIAS = 100.0  # OpenAI's range for logit_bias values: [-100, 100]
# the sampler compares top_p with float32 probabilities, where a smaller positive number rounds to 0
# and then no token would be kept: 2**-149 is float32's smallest positive (subnormal) value
MIN_TOP_P = 2.0**-149


class SamplingError(ValueError):
    """A sampling parameter out of range. `param` names it, `requirement` says what it must be, so
    the HTTP API can answer with its own name for the parameter (max_tokens / max_new_tokens)."""

    def __init__(self, param: str, requirement: str, value: object) -> None:
        super().__init__(f"{param} {requirement}, got {value!r}")
        self.param = param
        self.requirement = requirement
        self.value = value


@dataclass
class SamplingParams:
    """How to pick each next token; the one place its rules are checked (the HTTP API calls them too).

    temperature 0 (or below GREEDY_BELOW) is greedy; top_k <= 0 and top_p 1 disable those filters.
    `logit_bias` adds to the logits of the given token ids; `frequency_penalty` subtracts
    penalty * (times the token was generated), `presence_penalty` subtracts penalty once for every
    token generated at least once (OpenAI's definitions)."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    max_tokens: int = 128
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    seed: int | None = None
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    logit_bias: dict[int, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check(_is_real(self.temperature) and self.temperature >= 0, "temperature", "must be a finite number >= 0",
               self.temperature)
        _check(_is_real(self.top_p) and MIN_TOP_P <= self.top_p <= 1, "top_p",
               f"must be in [{MIN_TOP_P:.1e}, 1] (the sampler compares it in float32, where less is 0)", self.top_p)
        _check(_is_int(self.top_k) and -1 <= self.top_k <= MAX_TOKEN_ID, "top_k",
               f"must be -1 (off) or an integer in [0, {MAX_TOKEN_ID}]", self.top_k)
        _check(_is_int(self.max_tokens) and 1 <= self.max_tokens <= MAX_TOKEN_ID, "max_tokens",
               f"must be an integer in [1, {MAX_TOKEN_ID}]", self.max_tokens)
        _check(all(_is_token_id(t) for t in self.stop_token_ids), "stop_token_ids",
               f"must be token ids in [0, {MAX_TOKEN_ID}]", self.stop_token_ids)
        _check(self.seed is None or (_is_int(self.seed) and 0 <= self.seed <= MAX_SEED), "seed",
               "must be an integer in [0, 2**63 - 1]", self.seed)
        for name in ("frequency_penalty", "presence_penalty"):
            value = getattr(self, name)
            _check(_is_real(value) and -MAX_PENALTY <= value <= MAX_PENALTY, name,
                   f"must be in [-{MAX_PENALTY:g}, {MAX_PENALTY:g}]", value)
        _check(all(_is_token_id(t) and _is_real(b) and -MAX_LOGIT_BIAS <= b <= MAX_LOGIT_BIAS
                   for t, b in self.logit_bias.items()), "logit_bias",
               f"must map token ids in [0, {MAX_TOKEN_ID}] to numbers in [-{MAX_LOGIT_BIAS:g}, {MAX_LOGIT_BIAS:g}]",
               self.logit_bias)

    @property
    def is_greedy(self) -> bool:
        """The most likely token wins (after logit_bias and penalties, if any)."""
        return self.temperature < GREEDY_BELOW or self.top_k == 1

    @property
    def is_plain_greedy(self) -> bool:
        """The token is the argmax of the model's logits as they are: the device can pick it alone
        (overlap scheduling, CUDA graphs), without the sampler."""
        return self.is_greedy and not (self.logit_bias or self.frequency_penalty or self.presence_penalty)


def _check(ok: bool, param: str, requirement: str, value: object) -> None:
    if not ok:
        raise SamplingError(param, requirement, value)


def _is_real(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_token_id(value: object) -> bool:
    return _is_int(value) and 0 <= value <= MAX_TOKEN_ID


class RequestError(ValueError):
    """A request this model cannot take; the message says why (the HTTP API answers it with a 400)."""


def check_request(input_ids: list[int], sampling: SamplingParams, context_len: int, vocab_size: int) -> SamplingParams:
    """The rules a request must follow against its model, in one place: every producer of a
    `GenerateRequest` (the tokenizer workers, the offline `LLM`) calls this before rank 0 sees the
    request. Raises `RequestError`; returns `sampling` with max_tokens capped at what the context leaves after the
    prompt, so an unset (or too large) limit means "until the context is full"."""
    if not input_ids:
        raise RequestError("the prompt is empty")
    for what, ids in (("token id", input_ids), ("logit_bias token id", sampling.logit_bias)):
        outside = [i for i in ids if not 0 <= i < vocab_size]
        if outside:
            raise RequestError(f"{what} {outside[0]} is outside the vocabulary [0, {vocab_size})")
    if len(input_ids) >= context_len:
        raise RequestError(
            f"the prompt has {len(input_ids)} tokens; this model's context is {context_len} tokens"
            " (prompt plus at least one new token): shorten the prompt"
        )
    return replace(sampling, max_tokens=min(sampling.max_tokens, context_len - len(input_ids)))


@dataclass(eq=False)  # identity: two requests are never "equal"
class Req:
    """One request inside a scheduler: its tokens, its KV pages, and how many of its tokens have
    their K/V in those pages. A retracted request keeps its output: the prompt plus the output so far
    are computed again when it is admitted again (chapter 11)."""

    uid: int
    input_ids: list[int]
    sampling: SamplingParams
    max_total_len: int  # prompt + max_tokens: never more than the context (`check_request`)
    output_ids: list[int] = field(default_factory=list)
    pages: list[int] = field(default_factory=list)  # page table: borrowed prefix pages, then its own
    cached_len: int = 0  # tokens whose K/V are already in the pool
    generator: torch.Generator | None = None  # per-request RNG, so sampling is the same on every rank
    failure: str | None = None  # set mid-step (by the sampler) when this request alone cannot go on

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

    @classmethod
    def graph_decode(cls, inputs: torch.Tensor, last_indices: torch.Tensor, bs: int, attn_metadata: Any) -> Batch:
        """The decode batch a CUDA or CPU graph of `bs` rows is captured with: views of the static
        buffers each replay reads, inputs [3, >= bs] (token ids, positions, out slots) and
        last_indices [>= bs]. It holds no requests: a graph sees only tensors."""
        return cls(phase="decode", reqs=[], input_ids=inputs[0, :bs], positions=inputs[1, :bs],
                   out_slots=inputs[2, :bs], prefix_lens=[], extend_lens=[], last_indices=last_indices[:bs],
                   attn_metadata=attn_metadata)

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


class AttentionHooks(Protocol):
    """What a forward and the graph runners call on an attention backend. `AttentionBackend`
    (minisgl/attention/base.py) implements it; it is declared down here so that this module and the
    CPU plug-in (minisgl/cpu/graphs.py), which sit below the attention package, need not import it."""

    supports_cuda_graph: ClassVar[bool]
    supports_cpu_graph: ClassVar[bool]

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer_id: int, batch: Batch) -> torch.Tensor:
        ...

    def forward_rope(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer_id: int, batch: Batch,
                     positions: torch.Tensor, cos_sin: torch.Tensor,
                     qk_norm: tuple[torch.Tensor, torch.Tensor, float] | None = None) -> torch.Tensor | None:
        ...

    def init_graph_buffers(self, max_bs: int) -> None:
        ...

    def graph_metadata(self, bs: int) -> Any:
        ...

    def prepare_graph_replay(self, batch: Batch, bucket: int) -> None:
        ...


@dataclass
class ForwardContext:
    """The batch being computed and the attention backend that computes its attention."""

    batch: Batch
    attn_backend: AttentionHooks


_CTX: ForwardContext | None = None


@contextmanager
def forward_context(batch: Batch, attn_backend: AttentionHooks) -> Iterator[ForwardContext]:
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
