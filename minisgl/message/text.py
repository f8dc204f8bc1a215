"""The messages on the text side of the server: API -> tokenizer, tokenizer -> detokenizer, and
detokenizer -> API (chapter 02). The scheduler never sees them; they ride the same msgpack wire
format as the scheduler's messages, through `register_message`.

One request's journey: the API sends a `TokenizeRequest` to a tokenizer worker; the worker sends a
`DetokenizeStart` to the detokenizer and a `GenerateRequest` to rank 0; rank 0's `TokenOutput`s
go to the detokenizer, which turns them into `TextOutput`s for the API.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from minisgl.core import SamplingParams

from .messages import register_message


@register_message
@dataclass
class TokenizeRequest:
    """API -> tokenizer worker: a prompt given as exactly one of `text`, chat `messages` (the chat
    template is applied), or `input_ids`; how to sample; which strings end the output."""

    uid: int
    sampling: SamplingParams
    text: str | None = None
    messages: list[dict[str, Any]] | None = None
    input_ids: list[int] | None = None
    stop: list[str] = field(default_factory=list)


@register_message
@dataclass
class DetokenizeStart:
    """Tokenizer worker -> detokenizer, sent before the request reaches rank 0: what the
    detokenizer must know to stream `uid` (its stop strings). `error` set: the request was
    rejected before reaching rank 0, and the detokenizer only passes the error on."""

    uid: int
    stop: list[str] = field(default_factory=list)
    prompt_tokens: int = 0
    error: str | None = None


@register_message
@dataclass
class TextOutput:
    """Detokenizer -> API: the next piece of `uid`'s text. `text` never ends inside a UTF-8
    character and never shows a stop string or a prefix of one still being matched; `token_ids`
    are the tokens that arrived with it."""

    uid: int
    text: str
    token_ids: list[int]
    finished: bool = False
    finish_reason: str | None = None  # "stop" | "length" | "abort" | "error"
    error: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
