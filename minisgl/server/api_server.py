"""The HTTP API (chapter 02): OpenAI-compatible `/v1/chat/completions`, `/v1/completions`,
`/v1/models` and `/v1/models/{id}`, plus `/health`, `/metrics` (Prometheus text, chapter 11) and
the native `/generate` (which also returns token ids).

Each handler validates its body, submits the prompt through the `Frontend`, and waits for the
first output before answering: an error that the tokenizer or the scheduler finds (prompt longer
than the context, ...) still becomes a proper 400 instead of a stream that breaks off.

What no request can do: hold its slot after it ended (every path closes its stream), keep running
after its client left (the disconnect is noticed at once, streaming or not, and the abort frees
its KV pages), or break the connection with an unexpected error (a JSON 500, one log line, and
the connection stays usable). When the server stops, every open stream gets an error event.
What one connection may cost (body size, read deadlines) is bounded in `limits.py`; the OpenAPI
schema names each endpoint's request body and error answers, so a schema-driven client or fuzzer
can use it.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import socket
import time
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any

import uvicorn
from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, Response, StreamingResponse
from fastapi.routing import APIRoute
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.types import Receive, Scope, Send

from minisgl.message import TextOutput
from minisgl.models.config import ModelConfig
from minisgl.process import ChildWatcher, LaunchError

from .args import ServerArgs
from .frontend import ClientGone, Frontend, Overloaded, RequestStream, Unavailable
from .launch import ServerProcesses
from .limits import MIB, BodyLimits, TimedH11Protocol
from .metrics import CONTENT_TYPE, render_metrics
from .protocol import (
    REQUEST_BODIES,
    ApiError,
    ChatCompletionRequest,
    CompletionRequest,
    ErrorResponse,
    GenerateRequestBody,
    chat_messages,
    check_content_type,
    completion_prompt,
    parse_body,
    sampling_from_native,
    sampling_from_openai,
    usage,
)

logger = logging.getLogger("minisgl")

COMPLETIONS_DEFAULT_MAX_TOKENS = 16  # OpenAI's default for /v1/completions; chat defaults to "until done"


class ApiState:
    """What the handlers share: the frontend (created inside the server's event loop), the model."""

    def __init__(self, args: ServerArgs, processes: ServerProcesses) -> None:
        self.args = args
        self.processes = processes
        self.model_name = args.served_model_name
        self.model_path = str(args.scheduler.model_path)
        self.context_len = ModelConfig.from_dir(args.scheduler.model_path).max_position_embeddings
        self.created = int(time.time())
        self.frontend: Frontend | None = None

    def check_model(self, model: str | None) -> None:
        if model not in (None, self.model_name, self.model_path):
            raise ApiError(404, f"the model '{model}' does not exist; this server serves '{self.model_name}'",
                           "model", "model_not_found")


class _OneLineErrors(APIRoute):
    """Routes whose unexpected errors become a JSON 500 right here, with one log line. A catch-all
    `exception_handler(Exception)` would run in Starlette's outermost middleware instead, which
    re-raises: a traceback in the log and a closed keep-alive connection."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def handle(request: Request) -> Response:
            try:
                return await handler(request)
            except (ApiError, StarletteHTTPException):
                raise  # answered by their exception handlers
            except ClientDisconnect:  # the client's business, not an error of ours
                logger.info("a client left %s before its body arrived", request.url.path)
                return Response(status_code=499)  # nginx's code for it; nobody reads this
            except Exception as error:
                return _internal_error(request, error)

        return handle


def _internal_error(request: Request, error: Exception) -> JSONResponse:
    logger.error("internal error on %s: %s", request.url.path, _one_line(error))
    logger.debug("traceback", exc_info=error)
    return JSONResponse(ApiError(500, f"internal error: {_one_line(error)}").body(), status_code=500)


def _one_line(error: BaseException) -> str:
    return f"{type(error).__name__}: {' '.join(str(error).split())}"


def create_app(state: ApiState, on_startup: Callable[[Frontend], None] = lambda frontend: None) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state.frontend = Frontend(state.processes.addrs, state.args.max_pending_requests)
        state.frontend.start()
        on_startup(state.frontend)
        yield
        await state.frontend.close()

    api_key = state.args.api_key
    # with a key, the schema pages are off: a browser cannot send the key to /docs anyway
    docs: dict[str, Any] = {"docs_url": None, "redoc_url": None, "openapi_url": None} if api_key else {}
    app = FastAPI(title="minisgl", lifespan=lifespan, **docs)
    app.router.route_class = _OneLineErrors
    app.openapi = lambda: _openapi_schema(app)  # type: ignore[method-assign]
    app.add_middleware(BodyLimits, max_bytes=int(state.args.max_body_mb * MIB),
                       read_timeout_s=state.args.read_timeout_s)

    # ---- errors in OpenAI's shape -----------------------------------------------------------
    @app.exception_handler(ApiError)
    async def on_api_error(request: Request, error: ApiError) -> JSONResponse:
        return JSONResponse(error.body(), status_code=error.status, headers=error.headers)

    @app.exception_handler(StarletteHTTPException)
    async def on_http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
        # its headers carry `Allow` on a 405
        return JSONResponse(ApiError(error.status_code, str(error.detail)).body(), status_code=error.status_code,
                            headers=error.headers)

    @app.exception_handler(Exception)
    async def on_crash(request: Request, error: Exception) -> JSONResponse:
        return _internal_error(request, error)  # outside any route (rare): this one still closes the connection

    async def require_api_key(request: Request) -> None:
        if api_key is None:
            return
        # the scheme is case-insensitive (RFC 9110), the key is not
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        valid = hmac.compare_digest(given.strip().encode(), api_key.encode())  # constant time: no timing oracle
        if scheme.lower() != "bearer" or not valid:
            raise ApiError(401, "invalid or missing API key: send the header 'Authorization: Bearer <key>'",
                           code="invalid_api_key")

    # /health and /metrics stay open (load balancers and scrapers probe them); everything else needs
    # the key when one is set
    protected = APIRouter(dependencies=[Depends(require_api_key)], route_class=_OneLineErrors)

    # ---- endpoints ----------------------------------------------------------------------------
    @app.get("/health")
    async def health() -> JSONResponse:
        """200 while every process is alive, with how many requests are in flight and how many
        aborts rank 0 has confirmed; 503 (naming the dead child) otherwise."""
        frontend = state.frontend
        if frontend is None or frontend.failure is not None:
            return JSONResponse(ApiError(503, frontend.failure if frontend else "starting").body(), status_code=503)
        return JSONResponse({"status": "ok", "in_flight": frontend.num_pending, "aborted": frontend.num_aborted})

    @app.get("/metrics")
    async def metrics() -> Response:
        """Prometheus text format (metrics.py); open like /health, for scrapers."""
        assert state.frontend is not None
        return Response(render_metrics(state.frontend, state.args.scheduler.dp_size), media_type=CONTENT_TYPE)

    def model_card() -> dict[str, Any]:
        return {"id": state.model_name, "object": "model", "created": state.created, "owned_by": "minisgl",
                "max_model_len": state.context_len}

    @protected.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [model_card()]}

    @protected.get("/v1/models/{model:path}")  # `path`: served names may hold a slash (org/name)
    async def model(model: str) -> dict[str, Any]:
        state.check_model(model)
        return model_card()

    @protected.post("/v1/completions", **_documented(CompletionRequest))
    async def completions(request: Request) -> Response:
        body = await _parse(request, CompletionRequest)
        state.check_model(body.model)
        sampling, stop = sampling_from_openai(body, COMPLETIONS_DEFAULT_MAX_TOKENS)
        stream = _submit(state, sampling, stop, **completion_prompt(body))
        return await _respond(stream, request, body.stream, _include_usage(body),
                              _OpenAIFormat("cmpl", "text_completion", state.model_name, chat=False))

    @protected.post("/v1/chat/completions", **_documented(ChatCompletionRequest))
    async def chat_completions(request: Request) -> Response:
        body = await _parse(request, ChatCompletionRequest)
        state.check_model(body.model)
        # default: until the context, or the KV cache (rank 0 caps it), is full
        sampling, stop = sampling_from_openai(body, state.context_len)
        stream = _submit(state, sampling, stop, messages=chat_messages(body))
        return await _respond(stream, request, body.stream, _include_usage(body),
                              _OpenAIFormat("chatcmpl", "chat.completion", state.model_name, chat=True))

    @protected.post("/generate", **_documented(GenerateRequestBody))
    async def generate(request: Request) -> Response:
        body = await _parse(request, GenerateRequestBody)
        if (body.text is None) == (body.input_ids is None):
            raise ApiError(400, "give exactly one of 'text' and 'input_ids'", "text")
        sampling, stop = sampling_from_native(body.sampling_params)
        prompt = {"text": body.text} if body.text is not None else {"input_ids": body.input_ids}
        stream = _submit(state, sampling, stop, **prompt)
        return await _respond(stream, request, body.stream, True, _NativeFormat())

    app.include_router(protected)
    return app


# ---- the OpenAPI schema ---------------------------------------------------------------------------
# The handlers read their bodies themselves (strictly, after the Content-Type check, `_parse`), so
# FastAPI cannot see the request models: each route names its own, and the schema gets them all.
_ERRORS = {400: "invalid request: the message names the parameter", 401: "missing or wrong API key",
           404: "unknown model", 408: "the body stalled (--read-timeout)", 413: "the body is too large (--max-body-mb)",
           415: "not a JSON body", 503: "overloaded (--max-pending-requests), or a process died"}


def _documented(body: type[BaseModel]) -> dict[str, Any]:
    """The route's entries in the schema: its request body and its error answers."""
    content = {"application/json": {"schema": {"$ref": f"#/components/schemas/{body.__name__}"}}}
    return {"openapi_extra": {"requestBody": {"required": True, "content": content}},
            "responses": {status: {"model": ErrorResponse, "description": text} for status, text in _ERRORS.items()}}


def _openapi_schema(app: FastAPI) -> dict[str, Any]:
    if app.openapi_schema is None:
        schema = get_openapi(title=app.title, version=app.version, routes=app.routes)
        _, bodies = models_json_schema([(model, "validation") for model in REQUEST_BODIES],
                                       ref_template="#/components/schemas/{model}")
        schema.setdefault("components", {}).setdefault("schemas", {}).update(bodies["$defs"])
        app.openapi_schema = schema
    return app.openapi_schema


async def _parse(request: Request, model: type[BaseModel]) -> Any:
    check_content_type(request.headers.get("content-type"))
    return parse_body(model, await request.body())


def _include_usage(body: Any) -> bool:
    return bool(body.stream_options and body.stream_options.include_usage)


def _submit(state: ApiState, sampling: Any, stop: list[str], **prompt: Any) -> RequestStream:
    assert state.frontend is not None
    try:
        return state.frontend.submit(sampling, stop=stop, **prompt)
    except (Overloaded, Unavailable) as error:
        raise ApiError(503, str(error), code="overloaded" if isinstance(error, Overloaded) else None) from None


# ---- answering: whole, or as server-sent events -------------------------------------------------
class _OpenAIFormat:
    """The JSON of an OpenAI completion or chat completion, whole or as stream chunks."""

    def __init__(self, prefix: str, obj: str, model: str, chat: bool) -> None:
        self.id = f"{prefix}-{uuid.uuid4().hex}"
        self.obj = obj
        self.model = model
        self.chat = chat
        self.created = int(time.time())

    def _envelope(self, obj: str, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model, "choices": choices}

    def whole(self, text: str, token_ids: list[int], last: TextOutput) -> dict[str, Any]:
        if self.chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
                      "finish_reason": last.finish_reason}
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": last.finish_reason}
        return {**self._envelope(self.obj, [choice]), "usage": usage(last.prompt_tokens, last.completion_tokens)}

    def chunks(self, output: TextOutput, first: bool, include_usage: bool) -> list[dict[str, Any]]:
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        out: list[dict[str, Any]] = []
        if self.chat and first:
            out.append(self._envelope(obj, [self._choice({"role": "assistant", "content": ""}, None)]))
        if output.text:
            out.append(self._envelope(obj, [self._choice(output.text, None)]))
        if output.finished:
            out.append(self._envelope(obj, [self._choice("" if not self.chat else {}, output.finish_reason)]))
            if include_usage:
                out.append({**self._envelope(obj, []), "usage": usage(output.prompt_tokens, output.completion_tokens)})
        return out

    def _choice(self, content: str | dict[str, str], finish_reason: str | None) -> dict[str, Any]:
        if self.chat:
            delta = content if isinstance(content, dict) else {"content": content}
            return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return {"index": 0, "text": content, "logprobs": None, "finish_reason": finish_reason}


class _NativeFormat:
    """/generate: text plus the output token ids, whole or as they come."""

    def whole(self, text: str, token_ids: list[int], last: TextOutput) -> dict[str, Any]:
        return {"text": text, "output_ids": token_ids, "finish_reason": last.finish_reason,
                "usage": usage(last.prompt_tokens, last.completion_tokens)}

    def chunks(self, output: TextOutput, first: bool, include_usage: bool) -> list[dict[str, Any]]:
        chunk: dict[str, Any] = {"text": output.text, "output_ids": output.token_ids,
                                 "finish_reason": output.finish_reason if output.finished else None}
        if output.finished:
            chunk["usage"] = usage(output.prompt_tokens, output.completion_tokens)
        return [chunk]


async def _respond(stream: RequestStream, request: Request, streaming: bool, include_usage: bool,
                   fmt: _OpenAIFormat | _NativeFormat) -> Response:
    """Wait for the first output (an error there is still a plain 4xx), then answer whole or stream.
    Until the stream is handed to the response, a watcher aborts the request when the client leaves."""
    watcher = asyncio.get_running_loop().create_task(_cancel_on_disconnect(request, stream))
    handed_over = False
    try:
        first = await _next(stream)
        if first is None:
            return Response(status_code=499)  # the client left (nginx's code for it); nobody reads this
        if first.error is not None:
            raise ApiError(400, first.error)
        if not streaming:
            whole = await _whole(stream, first, fmt)
            return Response(status_code=499) if whole is None else JSONResponse(whole)
        handed_over = True  # from here Starlette notices the disconnect and cancels the events
        return _EventStream(stream, _events(stream, first, fmt, include_usage))
    finally:
        watcher.cancel()
        if not handed_over:
            stream.close()


async def _cancel_on_disconnect(request: Request, stream: RequestStream) -> None:
    """The body is read, so the next ASGI message is the disconnect: it arrives the moment the client
    goes, not at the next poll, even while tokens flow."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
    stream.cancel(ClientGone())


class _EventStream(StreamingResponse):
    """Server-sent events that close their request whichever way the response ends, even when it is
    cancelled before the first event (the generator's own `finally` would not run then)."""

    def __init__(self, stream: RequestStream, events: AsyncIterator[str]) -> None:
        super().__init__(events, media_type="text/event-stream")
        self.request_stream = stream

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.request_stream.close()


async def _next(stream: RequestStream) -> TextOutput | None:
    """The next output, or None once the client has left."""
    try:
        return await stream.next()
    except ClientGone:
        return None
    except Unavailable as error:
        raise ApiError(503, str(error)) from None


async def _whole(stream: RequestStream, output: TextOutput, fmt: Any) -> dict[str, Any] | None:
    """The whole answer, or None if the client left before it was done."""
    text, token_ids = output.text, list(output.token_ids)
    while not output.finished:
        next_output = await _next(stream)
        if next_output is None:
            return None
        output = next_output
        text += output.text
        token_ids += output.token_ids
    if output.error is not None:
        raise ApiError(500, output.error)
    return fmt.whole(text, token_ids, output)


async def _events(stream: RequestStream, output: TextOutput, fmt: Any, include_usage: bool) -> AsyncIterator[str]:
    """Server-sent events; a disconnect cancels this generator (and `_EventStream` aborts the request).
    Anything that ends the stream early is said in the stream as an OpenAI error event."""
    try:
        first = True
        while True:
            if output.error is not None:
                yield _sse(ApiError(500, output.error).body())
                return
            for chunk in fmt.chunks(output, first, include_usage):
                yield _sse(chunk)
            first = False
            if output.finished:
                yield "data: [DONE]\n\n"
                return
            next_output = await _next(stream)
            if next_output is None:
                return
            output = next_output
    except ApiError as error:  # a child died, or the server is stopping
        yield _sse(error.body())
    except Exception as error:  # the headers are sent: a 500 can only be an event now
        logger.error("internal error in a stream: %s", _one_line(error))
        yield _sse(ApiError(500, f"internal error: {_one_line(error)}").body())


def _sse(payload: dict[str, Any]) -> str:
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"


class _Server(uvicorn.Server):
    """uvicorn, except that stopping first ends every request in flight with an error (an error
    event for a stream), so open connections finish cleanly instead of being cut off."""

    def __init__(self, config: uvicorn.Config, state: ApiState) -> None:
        super().__init__(config)
        self.state = state

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        frontend = self.state.frontend
        if frontend is not None and frontend.failure is None:
            frontend.fail_all("the server is shutting down")
        await super().shutdown(sockets)


def http_config(app: FastAPI, args: ServerArgs, **overrides: Any) -> uvicorn.Config:
    """uvicorn's settings for `app`: h11 with a deadline on each request's header (limits.py)."""
    debug = args.log_level == "debug"
    settings: dict[str, Any] = {"log_level": "debug" if debug else "warning", "access_log": debug,
                                "timeout_graceful_shutdown": 2,
                                "http": TimedH11Protocol.with_read_timeout(args.read_timeout_s)}
    return uvicorn.Config(app, **{**settings, **overrides})


def run_api_server(args: ServerArgs, processes: ServerProcesses, watcher: ChildWatcher, sock: socket.socket) -> None:
    """Serve HTTP on `sock` until Ctrl-C, SIGTERM, or a child's death (then `watcher.failure` says which)."""
    state = ApiState(args, processes)
    server: uvicorn.Server | None = None

    def on_startup(frontend: Frontend) -> None:
        loop = asyncio.get_running_loop()

        def on_failure(reason: str) -> None:  # runs on the watcher thread
            loop.call_soon_threadsafe(frontend.fail_all, reason)
            assert server is not None
            server.should_exit = True

        watcher.on_failure = on_failure
        watcher.start()
        host, port = sock.getsockname()[:2]
        logger.info("ready: %s at http://%s:%d/v1 (OpenAI API), /generate, /health, /metrics", state.model_name,
                    host, port)

    server = _Server(http_config(create_app(state, on_startup), args), state)
    if args.api_key is None and args.host not in ("127.0.0.1", "localhost", "::1"):
        logger.warning("listening on %s without --api-key: anyone who can reach this port can use the model",
                       args.host)
    server.run(sockets=[sock])
    if not server.started:
        raise LaunchError("the HTTP server did not start (its error is above)")
