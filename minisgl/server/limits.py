"""What one HTTP connection may cost the server (chapter 02): a cap on the request body, checked
before the body is read, and read deadlines for a client that opens a connection and goes quiet.

- The body: a `Content-Length` above the cap is answered 413 at once, before a byte of the body is
  read; a chunked body (no length given) is counted as it arrives and refused the moment it passes
  the cap. The connection is then closed, so the rest of the body is never read.
- The header: a connection must deliver a request's whole header within the read timeout of opening
  (or of the previous answer), or it is closed. uvicorn only times out an idle keep-alive connection
  between requests, so a client that sends nothing, or half a header, would hold its connection (a
  file descriptor and a protocol object) for as long as it liked.
- The body again: a client may pause at most the read timeout between two pieces of its body; then
  it gets a 408 and the connection is closed.

Each is one line of the log, never a traceback.
"""

from __future__ import annotations

import asyncio
import logging

import h11
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from .protocol import ApiError

logger = logging.getLogger("minisgl")

MIB = 1 << 20
DEFAULT_MAX_BODY_MB = 16.0  # a 1M-token prompt as `input_ids` is about 7 MiB of JSON; this is twice that
DEFAULT_READ_TIMEOUT_S = 30.0
CLOSE = {"Connection": "close"}  # sent with a 408 or 413: the unread rest of the body ends the connection


def check_http_limits(max_body_mb: float, read_timeout_s: float) -> None:
    """The two flags are positive; a one-line ValueError naming the flag otherwise."""
    if not max_body_mb > 0:
        raise ValueError(f"--max-body-mb must be positive, got {max_body_mb}")
    if not read_timeout_s > 0:
        raise ValueError(f"--read-timeout must be positive (seconds), got {read_timeout_s}")


def body_too_large(max_bytes: int) -> ApiError:
    return ApiError(413, f"the request body is larger than this server's limit of {max_bytes} bytes; send a "
                         "smaller body, or start the server with a larger --max-body-mb", code="request_too_large",
                    headers=CLOSE)


class BodyLimits:
    """ASGI middleware: refuses a body above `max_bytes` (413) and a body that stalls for
    `read_timeout_s` (408), raising `ApiError` from `receive` so the route's own error handling
    answers it in OpenAI's shape."""

    def __init__(self, app: ASGIApp, max_bytes: int, read_timeout_s: float) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.read_timeout_s = read_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:  # answered without reading the body
            error = body_too_large(self.max_bytes)
            logger.info("refused a %d-byte body on %s (--max-body-mb)", declared, scope["path"])
            await JSONResponse(error.body(), error.status, headers=error.headers)(scope, receive, send)
            return
        await self.app(scope, self._guarded(receive), send)

    def _guarded(self, receive: Receive) -> Receive:
        received = 0
        body_done = False

        async def guarded() -> Message:
            nonlocal received, body_done
            if body_done:  # after the body only the disconnect is left to wait for, however long
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), self.read_timeout_s)
            except asyncio.TimeoutError:  # (TimeoutError itself only from Python 3.11)
                logger.info("a client paused its body for over %g s (--read-timeout); closing", self.read_timeout_s)
                raise ApiError(408, f"the request body stalled for {self.read_timeout_s:g} s; send it without "
                                    "pausing", code="request_timeout", headers=CLOSE) from None
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                body_done = not message.get("more_body", False)
                if received > self.max_bytes:
                    logger.info("refused a chunked body past %d bytes (--max-body-mb)", self.max_bytes)
                    raise body_too_large(self.max_bytes)
            else:
                body_done = True  # the client left mid-body
            return message

        return guarded


def _content_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            return int(value) if value.isdigit() else None  # h11 refuses a malformed one before this
    return None


class TimedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline for each request's header: from the moment the
    connection opens or the previous answer ends, until the header is complete."""

    read_timeout_s = DEFAULT_READ_TIMEOUT_S  # `with_read_timeout` makes a subclass with another

    @classmethod
    def with_read_timeout(cls, seconds: float) -> type[TimedH11Protocol]:
        return type(cls.__name__, (cls,), {"read_timeout_s": seconds})

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._header_deadline: asyncio.TimerHandle | None = None
        self._arm_header_deadline()

    def handle_events(self) -> None:
        super().handle_events()
        if self.conn.their_state is not h11.IDLE:  # a request's header arrived whole
            self._disarm_header_deadline()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self._arm_header_deadline()  # for the next request on this keep-alive connection

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_deadline()
        super().connection_lost(exc)

    def _arm_header_deadline(self) -> None:
        self._disarm_header_deadline()
        self._header_deadline = self.loop.call_later(self.read_timeout_s, self._header_too_slow)

    def _disarm_header_deadline(self) -> None:
        if self._header_deadline is not None:
            self._header_deadline.cancel()
            self._header_deadline = None

    def _header_too_slow(self) -> None:
        self._header_deadline = None
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            logger.info("closed a connection with no complete request header after %g s (--read-timeout)",
                        self.read_timeout_s)
            self.transport.close()
