"""The messages between the tokenizers (or the offline `LLM`), the schedulers and the detokenizer,
as plain dataclasses (chapter 06).

On the wire each is a msgpack map `{"type": <class name>, **fields}`: explicit, language-neutral,
and safe to decode (unlike pickle, a message cannot run code on the receiver).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Union

import msgpack

from minisgl.core import SamplingParams


@dataclass
class GenerateRequest:
    """Frontend -> rank-0 scheduler: a tokenized prompt to complete."""

    uid: int
    input_ids: list[int]
    sampling: SamplingParams


@dataclass
class AbortRequest:
    """Frontend -> scheduler: stop `uid` and free its KV pages (e.g. the client went away)."""

    uid: int


@dataclass
class ShutdownRequest:
    """Frontend -> every scheduler: leave the loop and exit."""


@dataclass
class TokenOutput:
    """Rank-0 scheduler -> frontend/detokenizer: new tokens of `uid`, and whether it finished."""

    uid: int
    token_ids: list[int]
    finished: bool = False
    finish_reason: str | None = None  # "stop" | "length" | "abort" | "error"
    error: str | None = None


@dataclass
class SchedulerStats:
    """Rank-0 scheduler -> detokenizer -> API, about once a second: what `/metrics` shows
    (chapter 11). The totals count since the server started. With data parallelism every replica's
    rank 0 reports its own, and `/metrics` shows their sum."""

    num_running: int  # requests decoding or prefilling
    num_waiting: int  # queued, retracted ones included
    kv_pages_total: int  # pages requests can get (page 0 is never handed out)
    kv_pages_free: int
    kv_pages_cached: int  # held by the prefix cache for later requests, used by none now: evictable
    prompt_tokens_total: int  # tokens prefilled at admission (a retracted request counts again)
    cached_tokens_total: int  # of those, found in the prefix cache instead of computed
    retracted_total: int
    generated_tokens_total: int
    replica: int = 0  # the data-parallel replica that reports (chapter 12)


@dataclass
class FinishedRequests:
    """Rank 0 of data-parallel replica `replica` -> the DP controller: these requests left it (so
    the controller's count of each replica's waiting + running requests stays exact; chapter 12)."""

    replica: int
    uids: list[int]


@dataclass
class StageStep:
    """Pipeline stage -> the next stage, once per scheduler step (chapter 13): what the first stage's
    scheduler took in this step, so that every later stage takes the same decisions: the new
    messages (each encoded), and the tokens of the micro-batch it completed, if any, with the rows
    whose sampling failed. The last stage returns a micro-batch's tokens to the first in the same
    form, without messages."""

    messages: list[bytes] = field(default_factory=list)
    tokens: list[int] | None = None
    failures: dict[int, str] = field(default_factory=dict)  # batch row -> reason


Message = Union[
    GenerateRequest, AbortRequest, ShutdownRequest, TokenOutput, SchedulerStats, FinishedRequests
]
_TYPES: dict[str, type] = {
    cls.__name__: cls
    for cls in (GenerateRequest, AbortRequest, ShutdownRequest, TokenOutput, SchedulerStats, FinishedRequests,
                StageStep)
}


def register_message(cls: type) -> type:
    """Let another part of minisgl send its own dataclass over the same wire format."""
    _TYPES[cls.__name__] = cls
    return cls


def encode_message(message: Any) -> bytes:
    return msgpack.packb({"type": type(message).__name__, **asdict(message)})


def decode_message(data: bytes) -> Any:
    # int map keys: SamplingParams.logit_bias maps token ids to biases (every sender is our own process)
    raw: dict[str, Any] = msgpack.unpackb(data, strict_map_key=False)
    cls = _TYPES[raw.pop("type")]
    if isinstance(raw.get("sampling"), dict):  # any message may carry a SamplingParams as `sampling`
        raw["sampling"] = SamplingParams(**raw["sampling"])
    names = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in raw.items() if k in names})
