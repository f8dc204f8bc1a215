"""The main process's end of the pipeline, shared by the HTTP API and the shell (chapter 02):
send `TokenizeRequest`s to the tokenizer workers, receive `TextOutput`s from the detokenizer, and
hand each request its own stream of outputs. It also keeps the counts `/metrics` shows: its own
(requests submitted, finished by reason) and rank 0's latest `SchedulerStats`.

A request always goes to tokenizer worker `uid % num_tokenizers`, and so does its abort: one
worker forwards both in order, so rank 0 never sees an abort before the request it cancels.

A request holds a slot (one of `max_pending`) from `submit` until its last output or its abort;
`submit` takes the slot only once the request is on its way, so a request that fails before (a
value msgpack cannot carry) holds none.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from typing import Any

from minisgl.core import SamplingParams
from minisgl.message import (
    AbortRequest,
    AsyncPullQueue,
    IpcAddresses,
    PushQueue,
    SchedulerStats,
    TextOutput,
    TokenizeRequest,
)
from minisgl.trace import TRACE

class Overloaded(Exception):
    """Too many requests in flight; the API answers 503."""


class Unavailable(Exception):
    """A child process died: nothing will answer any more; the API answers 503."""


class ClientGone(Exception):
    """The client disconnected while its request was running."""


class Frontend:
    def __init__(self, addrs: IpcAddresses, max_pending: int) -> None:
        self.max_pending = max_pending
        self._tokenizers = [PushQueue(addr) for addr in addrs.tokenizers]  # sends never block the event loop
        self._outputs = AsyncPullQueue(addrs.api)
        self._streams: dict[int, asyncio.Queue[TextOutput | Exception]] = {}
        self._uids = itertools.count()
        self.failure: str | None = None
        self.num_aborted = 0
        self.num_submitted = 0
        self.num_finished: Counter[str] = Counter()  # finish reason -> requests
        self.stats: dict[int, SchedulerStats] = {}  # replica -> its rank 0's latest numbers
        self._reader: asyncio.Task | None = None

    def start(self) -> None:
        """Start receiving; call from inside the event loop that will serve requests."""
        self._reader = asyncio.get_running_loop().create_task(self._read_outputs())

    async def _read_outputs(self) -> None:
        try:
            while True:
                output: TextOutput | SchedulerStats = await self._outputs.get()
                if isinstance(output, SchedulerStats):
                    self.stats[output.replica] = output  # for /metrics
                    continue
                if output.finished:
                    self.num_finished[output.finish_reason or "unknown"] += 1
                    TRACE.instant("request out", "request", uid=output.uid, reason=output.finish_reason)
                stream = self._streams.get(output.uid)
                if stream is not None:
                    stream.put_nowait(output)
                elif output.finish_reason == "abort":
                    self.num_aborted += 1  # rank 0 confirms an abort: the request's KV pages are free
                # else: the tail of an abandoned request, dropped
        except Exception as error:  # without this reader nothing answers: fail loudly, never hang
            self.fail_all(f"the API's output reader stopped: {type(error).__name__}: {error}")

    @property
    def num_pending(self) -> int:
        return len(self._streams)

    def submit(
        self,
        sampling: SamplingParams,
        *,
        text: str | None = None,
        messages: list[dict[str, Any]] | None = None,
        input_ids: list[int] | None = None,
        stop: list[str] | None = None,
    ) -> RequestStream:
        """Send one prompt (exactly one of `text`, `messages`, `input_ids`) on its way."""
        if self.failure is not None:
            raise Unavailable(self.failure)
        if len(self._streams) >= self.max_pending:
            raise Overloaded(f"{len(self._streams)} requests are in flight (--max-pending-requests); retry later")
        uid = next(self._uids)
        TRACE.instant("request in", "request", uid=uid)  # before the put: the trace keeps cause before effect
        # sent first, then the slot is taken: a request that cannot be encoded holds none (no output
        # can arrive in between, the reader runs on this same event loop)
        self._tokenizer_of(uid).put(TokenizeRequest(uid, sampling, text, messages, input_ids, list(stop or [])))
        self.num_submitted += 1
        self._streams[uid] = asyncio.Queue()
        return RequestStream(self, uid)

    def _tokenizer_of(self, uid: int) -> PushQueue:
        return self._tokenizers[uid % len(self._tokenizers)]

    def abort(self, uid: int) -> None:
        """Forget `uid` and tell rank 0 to stop it and free its KV pages."""
        if self._streams.pop(uid, None) is not None:
            self._tokenizer_of(uid).put(AbortRequest(uid))

    def fail_all(self, reason: str) -> None:
        """A child died: end every waiting request with `Unavailable`, and refuse new ones."""
        self.failure = reason
        for stream in self._streams.values():
            stream.put_nowait(Unavailable(reason))

    async def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)
        for tokenizer in self._tokenizers:
            tokenizer.close()
        self._outputs.close()


class RequestStream:
    """One request's outputs, in order. `close()` (always, in a `finally`) aborts it if unfinished."""

    def __init__(self, frontend: Frontend, uid: int) -> None:
        self.frontend = frontend
        self.uid = uid
        self._queue = frontend._streams[uid]
        self.finished = False

    async def next(self) -> TextOutput:
        """The next output; raises what `cancel` was given (or `Unavailable` if a child died)."""
        item = await self._queue.get()
        if isinstance(item, Exception):
            raise item
        if item.finished:
            self.finished = True
            self.frontend._streams.pop(self.uid, None)
        return item

    def cancel(self, error: Exception) -> None:
        """Make the waiting (or the next) `next()` raise `error`, e.g. `ClientGone` on a disconnect."""
        self._queue.put_nowait(error)

    def close(self) -> None:
        if not self.finished:
            self.frontend.abort(self.uid)
