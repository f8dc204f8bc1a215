"""The OpenAI-compatible request bodies, how they become `SamplingParams`, and the error JSON
(chapter 02). Only what the engine honours is accepted: `n` other than 1 or `logprobs` get a 400
naming the parameter, rather than being silently ignored."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from minisgl.core import SamplingParams

MAX_SEED = 2**63 - 1


class ApiError(Exception):
    """An error answered in OpenAI's shape: {"error": {"message", "type", "param", "code"}}."""

    TYPES = {400: "invalid_request_error", 401: "invalid_request_error", 404: "invalid_request_error",
             503: "server_error", 500: "server_error"}

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code

    def body(self) -> dict[str, Any]:
        error_type = self.TYPES.get(self.status, "invalid_request_error")
        return {"error": {"message": self.message, "type": error_type, "param": self.param, "code": self.code}}


class StreamOptions(BaseModel):
    include_usage: bool = False


class SamplingFields(BaseModel):
    """Fields shared by /v1/completions and /v1/chat/completions. `top_k` and `ignore_eos` are
    extensions (the openai client sends them through `extra_body`)."""

    model: str | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    n: int | None = None
    stop: str | list[str] | None = None
    seed: int | None = None
    ignore_eos: bool = False
    stream: bool = False
    stream_options: StreamOptions | None = None
    logprobs: bool | int | None = None


class CompletionRequest(SamplingFields):
    prompt: str | list[int] | list[str] | list[list[int]]
    echo: bool = False


class ContentPart(BaseModel):
    type: str
    text: str | None = None


class ChatMessage(BaseModel):
    role: Literal["system", "user", "assistant", "developer", "tool"]
    content: str | list[ContentPart] | None = None


class ChatCompletionRequest(SamplingFields):
    messages: list[ChatMessage]
    max_completion_tokens: int | None = None


class NativeSampling(BaseModel):
    """`sampling_params` of the native /generate endpoint."""

    max_new_tokens: int = 128
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    stop: str | list[str] | None = None
    stop_token_ids: list[int] = []
    ignore_eos: bool = False
    seed: int | None = None


class GenerateRequestBody(BaseModel):
    """Body of /generate: `text` or `input_ids`; the answer carries the output token ids."""

    text: str | None = None
    input_ids: list[int] | None = None
    sampling_params: NativeSampling = NativeSampling()
    stream: bool = False


def parse_body(model: type[BaseModel], body: Any) -> Any:
    """Validate a decoded JSON body; the first problem becomes a one-line 400 naming its field."""
    try:
        return model.model_validate(body)
    except ValidationError as error:
        first = error.errors()[0]
        param = ".".join(str(part) for part in first["loc"]) or None
        raise ApiError(400, f"{param or 'body'}: {first['msg']}", param=param) from None


def sampling_from_openai(
    request: SamplingFields, max_tokens: tuple[str, int | None], default_max_tokens: int, context_len: int
) -> tuple[SamplingParams, list[str]]:
    """`SamplingParams` and stop strings from an OpenAI body. `max_tokens` is (parameter name, value);
    the tokenizer worker later caps it at what the context leaves after the prompt."""
    if request.n not in (None, 1):
        raise ApiError(400, f"n={request.n} is not supported: this server returns one choice per request; use n=1", "n")
    if request.logprobs:
        raise ApiError(400, "logprobs are not supported by this server; leave logprobs unset", "logprobs")
    param, value = max_tokens
    if value is not None and value < 1:
        raise ApiError(400, f"{param} must be at least 1, got {value}", param)
    return _sampling(
        temperature=1.0 if request.temperature is None else request.temperature,
        top_p=1.0 if request.top_p is None else request.top_p,
        top_k=-1 if request.top_k is None else request.top_k,
        max_tokens=default_max_tokens if value is None else min(value, context_len),
        seed=request.seed,
        ignore_eos=request.ignore_eos,
    ), _stop_list(request.stop)


def sampling_from_native(params: NativeSampling, context_len: int) -> tuple[SamplingParams, list[str]]:
    if params.max_new_tokens < 1:
        raise ApiError(400, f"max_new_tokens must be at least 1, got {params.max_new_tokens}", "max_new_tokens")
    return _sampling(
        temperature=params.temperature, top_p=params.top_p, top_k=params.top_k,
        max_tokens=min(params.max_new_tokens, context_len), seed=params.seed, ignore_eos=params.ignore_eos,
        stop_token_ids=params.stop_token_ids,
    ), _stop_list(params.stop)


def _sampling(**fields: Any) -> SamplingParams:
    if fields["temperature"] < 0:
        raise ApiError(400, f"temperature must be >= 0, got {fields['temperature']}", "temperature")
    if not 0 < fields["top_p"] <= 1:
        raise ApiError(400, f"top_p must be in (0, 1], got {fields['top_p']}", "top_p")
    seed = fields["seed"]
    if seed is not None and not 0 <= seed <= MAX_SEED:
        raise ApiError(400, f"seed must be in [0, 2**63 - 1], got {seed}", "seed")
    return SamplingParams(**fields)


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
