"""The OpenAI-compatible request bodies, how they become `SamplingParams`, and the error JSON
(chapter 02).

Bodies are parsed strictly: JSON only (a browser's cross-origin `text/plain` post never reaches
the engine), no type coercion (`"5"` and `true` are not numbers), no NaN or infinity, and a
parameter this server does not implement (`tools`, `best_of`, `suffix`, ...) is a 400 that names
it rather than being silently ignored. Numbers are checked by `SamplingParams` itself, the one
owner of those rules; the prompt rules (empty, too long, outside the vocabulary) come later, in
the tokenizer worker (`check_request`).
"""

from __future__ import annotations

import json
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from minisgl.core import MAX_TOKEN_ID, SamplingError, SamplingParams

JSON_TYPES = ("application/json",)  # also any application/*+json


class ApiError(Exception):
    """An error answered in OpenAI's shape: {"error": {"message", "type", "param", "code"}}."""

    TYPES = {401: "invalid_request_error", 500: "server_error", 503: "server_error"}

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.headers = headers  # sent with the answer (`Connection: close` after an unread body)

    def body(self) -> dict[str, Any]:
        error_type = self.TYPES.get(self.status, "invalid_request_error")
        return {"error": {"message": self.message, "type": error_type, "param": self.param, "code": self.code}}


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorResponse(BaseModel):
    """The body of every error answer (the OpenAPI schema documents it for each status)."""

    error: ErrorDetail


class _Body(BaseModel):
    """Strict JSON: unknown fields are errors, no coercion between types, finite numbers only.
    An explicit `null` means "not set" for every optional field, and for the fields of OpenAI's
    schema named in `NULL_MEANS_ABSENT` that this server does not implement: SDKs and frameworks
    send such nulls. Anything else about those fields (a value, or a name outside the schema)
    stays a 400 that names it."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)
    NULL_MEANS_ABSENT: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def null_means_absent(cls, name: str) -> bool:
        field = cls.model_fields.get(name)
        return (field is not None and not field.is_required()) or name in cls.NULL_MEANS_ABSENT


TokenId = Annotated[int, Field(ge=0, le=MAX_TOKEN_ID)]


class StreamOptions(_Body):
    include_usage: bool = False


# The optional fields of OpenAI's chat and (legacy) completions request bodies that this server
# does not implement: a null for one of them is "not set", any value a 400 naming it.
OPENAI_UNIMPLEMENTED = frozenset({
    "audio", "best_of", "function_call", "functions", "metadata", "modalities", "parallel_tool_calls",
    "prediction", "prompt_cache_key", "reasoning_effort", "safety_identifier", "service_tier", "store",
    "suffix", "tool_choice", "tools", "top_logprobs", "verbosity", "web_search_options",
})


class SamplingFields(_Body):
    """Fields shared by /v1/completions and /v1/chat/completions. `top_k` and `ignore_eos` are
    extensions (the openai client sends them through `extra_body`); `user` is accepted and unused."""

    NULL_MEANS_ABSENT = OPENAI_UNIMPLEMENTED

    model: str | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    n: int | None = None
    stop: str | list[str] | None = None
    seed: int | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    logit_bias: dict[TokenId, float] | None = None
    ignore_eos: bool = False
    stream: bool = False
    stream_options: StreamOptions | None = None
    logprobs: bool | int | None = None
    user: str | None = None

    def token_limits(self) -> dict[str, int | None]:
        """The output-length fields this body can carry, by name, oldest first."""
        return {"max_tokens": self.max_tokens}


class CompletionRequest(SamplingFields):
    prompt: str | list[TokenId] | list[str] | list[list[TokenId]]
    echo: bool = False


class ContentPart(_Body):
    type: str
    text: str | None = None


class ChatMessage(_Body):
    role: Literal["system", "user", "assistant", "developer", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None


class ResponseFormat(_Body):
    """OpenAI's `response_format`: only plain text is produced; the JSON modes are refused by name."""

    type: str
    json_schema: dict[str, Any] | None = None


class ChatCompletionRequest(SamplingFields):
    messages: list[ChatMessage]
    max_completion_tokens: int | None = None  # OpenAI's newer name for max_tokens
    response_format: ResponseFormat | None = None

    def token_limits(self) -> dict[str, int | None]:
        return {**super().token_limits(), "max_completion_tokens": self.max_completion_tokens}


class NativeSampling(_Body):
    """`sampling_params` of the native /generate endpoint."""

    max_new_tokens: int = 128
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    stop: str | list[str] | None = None
    stop_token_ids: list[TokenId] = []
    ignore_eos: bool = False
    seed: int | None = None
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    logit_bias: dict[TokenId, float] = {}


class GenerateRequestBody(_Body):
    """Body of /generate: `text` or `input_ids`; the answer carries the output token ids."""

    text: str | None = None
    input_ids: list[TokenId] | None = None
    sampling_params: NativeSampling = NativeSampling()
    stream: bool = False


REQUEST_BODIES = (CompletionRequest, ChatCompletionRequest, GenerateRequestBody)  # what the endpoints read
_BODIES = (StreamOptions, CompletionRequest, ContentPart, ChatMessage, ResponseFormat, ChatCompletionRequest,
           NativeSampling, GenerateRequestBody)
_FIELD_NAMES = {name for body in _BODIES for name in body.model_fields}


def check_content_type(content_type: str | None) -> None:
    """JSON or nothing: form and text bodies (which a browser may send cross-origin without asking)
    are refused before they are read."""
    if content_type is None:
        return  # curl --data-binary without -H, scripts: the body must still parse as JSON
    media_type = content_type.split(";", 1)[0].strip().lower()
    if media_type not in JSON_TYPES and not (media_type.startswith("application/") and media_type.endswith("+json")):
        raise ApiError(415, f"Content-Type {media_type!r} is not supported; send JSON with "
                            "'Content-Type: application/json'", code="unsupported_media_type")


def parse_body(model: type[_Body], raw: bytes | str) -> Any:
    """Validate a raw JSON body; the problem becomes a one-line 400 naming its parameter."""
    try:
        return model.model_validate_json(_without_nulls(model, raw))
    except ValidationError as error:
        raise _as_api_error(error) from None


def _without_nulls(model: type[_Body], raw: bytes | str) -> bytes | str:
    """The body less its top-level `null`s that mean "not set" (`_Body.null_means_absent`). The
    JSON is validated as JSON afterwards, so that its rules (object keys as token ids) still hold;
    a body that is not a JSON object goes on unchanged, for pydantic to name what is wrong."""
    if (b"null" if isinstance(raw, bytes) else "null") not in raw:
        return raw  # the usual body: parsed once
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):  # RecursionError: nested too deep for this parser
        return raw
    if not isinstance(data, dict):
        return raw
    kept = {name: value for name, value in data.items() if value is not None or not model.null_means_absent(name)}
    return raw if len(kept) == len(data) else json.dumps(kept)


def _as_api_error(error: ValidationError) -> ApiError:
    problems = error.errors(include_url=False)
    if problems[0]["type"] == "json_invalid":
        return ApiError(400, f"the request body is not valid JSON: {problems[0]['msg']}")
    unknown = [".".join(str(p) for p in e["loc"]) for e in problems if e["type"] == "extra_forbidden"]
    if unknown:
        names = ", ".join(repr(name) for name in unknown)
        return ApiError(400, f"unsupported parameter(s) {names}: this server does not implement them; remove them",
                        unknown[0])
    # A union ("str or list of ids") reports one error per form, the form's name inside `loc`:
    # drop those names, and keep the most specific error (the deepest path).
    paths = [[p for p in e["loc"] if isinstance(p, int) or p in _FIELD_NAMES] for e in problems]
    best = max(range(len(problems)), key=lambda i: (len(paths[i]), -i))
    param = ".".join(str(p) for p in paths[best]) or None
    return ApiError(400, f"{param or 'body'}: {problems[best]['msg']}", param=param)


def sampling_from_openai(request: SamplingFields, default_max_tokens: int) -> tuple[SamplingParams, list[str]]:
    """`SamplingParams` and stop strings from an OpenAI body. A chat body may carry both `max_tokens`
    and its newer name `max_completion_tokens`: each given one is checked, the newer one wins. The
    tokenizer worker later caps the limit at what the context leaves after the prompt, and rank 0 at
    what its KV cache holds."""
    if request.n not in (None, 1):
        raise ApiError(400, f"n={request.n} is not supported: this server returns one choice per request; use n=1", "n")
    if request.logprobs is not None and request.logprobs is not False:  # completions' 0 asks for them too
        raise ApiError(400, "logprobs are not supported by this server; leave logprobs unset", "logprobs")
    if request.stream_options is not None and not request.stream:
        raise ApiError(400, "stream_options is only allowed when stream is true", "stream_options")
    response_format = request.response_format if isinstance(request, ChatCompletionRequest) else None
    if response_format is not None and response_format.type != "text":
        raise ApiError(400, f"response_format type {response_format.type!r} is not supported: this server "
                            "produces plain text only; use {\"type\": \"text\"} or leave it unset", "response_format")
    given = {name: value for name, value in request.token_limits().items() if value is not None}
    for name, value in given.items():  # the SamplingParams rule, under each field's own name
        _sampling({"max_tokens": name}, max_tokens=value)
    name, max_tokens = list(given.items())[-1] if given else ("max_tokens", default_max_tokens)
    return _sampling(
        {"max_tokens": name},
        temperature=1.0 if request.temperature is None else request.temperature,
        top_p=1.0 if request.top_p is None else request.top_p,
        top_k=-1 if request.top_k is None else request.top_k,
        max_tokens=max_tokens,
        seed=request.seed,
        ignore_eos=request.ignore_eos,
        frequency_penalty=request.frequency_penalty or 0.0,
        presence_penalty=request.presence_penalty or 0.0,
        logit_bias=request.logit_bias or {},
    ), _stop_list(request.stop)


def sampling_from_native(params: NativeSampling) -> tuple[SamplingParams, list[str]]:
    return _sampling(
        {"max_tokens": "max_new_tokens"},
        temperature=params.temperature, top_p=params.top_p, top_k=params.top_k, max_tokens=params.max_new_tokens,
        seed=params.seed, ignore_eos=params.ignore_eos, stop_token_ids=params.stop_token_ids,
        frequency_penalty=params.frequency_penalty, presence_penalty=params.presence_penalty,
        logit_bias=params.logit_bias,
    ), _stop_list(params.stop)


def _sampling(api_names: dict[str, str], **fields: Any) -> SamplingParams:
    """`SamplingParams(**fields)`; a value it refuses is a 400 under the name the client used."""
    try:
        return SamplingParams(**fields)
    except SamplingError as error:
        param = api_names.get(error.param, error.param)
        raise ApiError(400, f"{param} {error.requirement}, got {error.value!r}", param) from None


def _stop_list(stop: str | list[str] | None) -> list[str]:
    if stop is None:
        return []
    return [stop] if isinstance(stop, str) else [s for s in stop if s]


def chat_messages(request: ChatCompletionRequest) -> list[dict[str, str]]:
    """Messages as the chat template expects them: text content only."""
    if not request.messages:
        raise ApiError(400, "messages must not be empty", "messages")
    messages = []
    for message in request.messages:
        content = message.content
        if isinstance(content, list):
            if any(part.type != "text" for part in content):
                raise ApiError(400, "only text content parts are supported", "messages")
            content = "".join(part.text or "" for part in content)
        messages.append({"role": message.role, "content": content or ""})
    return messages


def completion_prompt(request: CompletionRequest) -> dict[str, Any]:
    """The prompt as `text=` or `input_ids=` for the frontend; a batch of prompts is one too many."""
    prompt = request.prompt
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list)):
        if len(prompt) != 1:
            raise ApiError(400, f"got {len(prompt)} prompts; send one prompt per request", "prompt")
        prompt = prompt[0]
    if request.echo:
        raise ApiError(400, "echo is not supported by this server", "echo")
    return {"text": prompt} if isinstance(prompt, str) else {"input_ids": list(prompt)}


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}
