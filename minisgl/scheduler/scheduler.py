"""The per-rank scheduler loop: receive messages, admit requests, pick a batch, run it, reply.

Every rank runs this same loop on the same messages in the same order (rank 0 broadcasts them),
so every rank takes the same decisions without asking the others (chapter 06):
- prefill first: continue half-prefilled prompts, then admit waiting ones FIFO while the token
  budget, the running-request limit and the KV budget allow; a prompt longer than the budget is
  chunked over several steps;
- otherwise decode every running request, sorted by uid.

KV pages come on demand (chapter 11, `kv_budget.py`): admission takes pages for the prompt only,
less the prefix the radix cache lends it, and a decode step gives a request one more page when its
next token starts one. When a decode step cannot get its pages, the most recently admitted requests
are retracted: their KV goes back to the cache, their tokens stay, and they wait at the front of
the queue to be computed again. A request alone always fits (`_add_request` checks it), so the
oldest request always makes progress.

Overlap (chapter 10, on by default on CUDA): the step is launched without waiting for its tokens,
and the previous step's tokens are processed while the device runs it. Bookkeeping that needs no
token value (KV progress, prefill -> decode, one more output slot) happens at launch; the slot holds
a placeholder -(i + 1), "token i of that step", which the engine fills in on the device when the
next decode step reads it. A stop token is therefore seen one step late: that request rides along
in one extra step whose token is dropped. The length limit is known ahead: a request whose output
slots (placeholders included) reach it is not scheduled again, so with or without overlap the
decode batches are the same until a stop token. Overlap needs plain greedy requests only (no
temperature, logit bias or penalties: the sampler works on the CPU); any other request in the
system turns it off until it leaves.

One request never stops the loop: whatever concerns one request alone (its admission, its row of
sampling) fails that request with an error output and frees its KV pages, identically on every
rank. A failing forward step stops the rank (its peers wait in a collective, or the device is in
an unknown state), with an error that names the requests of the step.
A retraction waits for the pending step's tokens first, so a retracted request holds no placeholder.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from itertools import chain
from typing import TYPE_CHECKING

import torch

from minisgl.config import SchedulerConfig
from minisgl.core import Batch, Req, RequestError
from minisgl.kvcache import create_prefix_cache
from minisgl.message import AbortRequest, GenerateRequest, Message, SchedulerStats, ShutdownRequest, TokenOutput
from minisgl.trace import TRACE

from .batch import make_decode_batch, make_prefill_batch
from .io import SchedulerIO
from .kv_budget import KVBudget

if TYPE_CHECKING:  # the launcher imports this package; only a rank's process builds an engine
    from minisgl.engine.device import TokenFuture
    from minisgl.engine.engine import Engine

logger = logging.getLogger(__name__)

HOST = torch.device("cpu")  # batches are built here; the engine moves them without a sync
STATS_INTERVAL_S = 1.0  # how often rank 0 sends its numbers for /metrics


class Scheduler:
    def __init__(self, config: SchedulerConfig, engine: Engine, io: SchedulerIO) -> None:
        self.config = config
        self.engine = engine
        self.io = io
        self.pool = engine.kv_pool
        self.cache = create_prefix_cache(config.cache, self.pool.allocator, self.pool.page_size)
        self.kv = KVBudget(self.cache, self.pool)
        if config.world_rank == 0:  # (every rank has the same cache: one line is enough)
            self.kv.warn_if_below(engine.model_config.max_position_embeddings)
        self.eos_ids = set(engine.model_config.eos_token_ids)
        self.waiting: deque[Req] = deque()
        self.prefilling: list[Req] = []  # admitted, prompt not fully in the KV cache yet
        self.running: dict[int, Req] = {}  # decoding, in the order they were admitted
        self.stopped = False
        self.num_retracted = 0
        self.num_generated = 0
        self.num_steps = 0  # batches run; the trace names each step by its number
        self._stats_sent_at = 0.0
        # overlap: the launched step whose tokens are not processed yet, with (batch row, request,
        # index of its placeholder in output_ids) of each request that gets a token, and its number
        self.pending: tuple[list[tuple[int, Req, int]], TokenFuture, int] | None = None

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.prefilling or self.running)

    def run_forever(self) -> None:
        while not self.stopped:
            self.step()

    def step(self) -> None:
        """Receive, schedule one batch, run it, send the new tokens (with overlap: launch it, then
        send the previous step's tokens)."""
        for message in self.io.receive(blocking=not self.has_work and self.pending is None):
            self._handle(message)
        overlap = self.engine.overlap and self._all_plain_greedy()
        if not overlap:
            self._complete_pending()  # every token on the host before scheduling
        batch = self._schedule_prefill() or self._schedule_decode()
        launched = None
        if batch is not None:
            self.num_steps += 1
            step = self.num_steps
            if TRACE.enabled:
                TRACE.instant("schedule", "batch", step=step, phase=batch.phase, uids=[r.uid for r in batch.reqs])
            with _naming_requests(f"a {batch.phase} step", batch.reqs):
                with TRACE.span("forward", "batch", step=step, phase=batch.phase, tokens=batch.num_tokens):
                    if overlap:
                        future = self.engine.forward_async(batch)
                    else:
                        tokens = self.engine.forward(batch)
                expecting = self._advance(batch)
                if overlap:
                    launched = (expecting, future, step)
                else:
                    self.io.send(self._complete(expecting, tokens, step))
        self._complete_pending()
        self.pending = launched
        self._send_stats_now_and_then()

    def _send_stats_now_and_then(self) -> None:
        if time.monotonic() - self._stats_sent_at >= STATS_INTERVAL_S:
            self.io.send_stats(self.stats())
            self._stats_sent_at = time.monotonic()

    def stats(self) -> SchedulerStats:
        return SchedulerStats(
            num_running=self._num_admitted(),
            num_waiting=len(self.waiting),
            kv_pages_total=self.pool.allocator.num_pages - 1,
            kv_pages_free=self.pool.allocator.num_free,
            kv_pages_cached=self.cache.num_evictable,
            prompt_tokens_total=self.kv.prompt_tokens,
            cached_tokens_total=self.kv.cached_tokens,
            retracted_total=self.num_retracted,
            generated_tokens_total=self.num_generated,
        )

    def _all_plain_greedy(self) -> bool:
        return all(r.sampling.is_plain_greedy for r in chain(self.waiting, self.prefilling, self.running.values()))

    def _complete_pending(self) -> None:
        if self.pending is not None:
            expecting, future, step = self.pending
            self.pending = None
            with _naming_requests("an overlapped step", [req for _, req, _ in expecting]):
                tokens = future.tokens()  # a device error of that step surfaces here
            self.io.send(self._complete(expecting, tokens, step))

    # ---- messages -------------------------------------------------------------------------
    def _handle(self, message: Message) -> None:
        TRACE.instant("handle", "message", message=type(message).__name__, uid=getattr(message, "uid", None))
        if isinstance(message, GenerateRequest):
            self._add_request(message)
        elif isinstance(message, AbortRequest):
            self._abort(message.uid)
        elif isinstance(message, ShutdownRequest):
            self.stopped = True

    def _add_request(self, message: GenerateRequest) -> None:
        """Queue the request, or answer it with an error: anything that goes wrong here concerns this
        request alone, and goes wrong identically on every rank, so the loop goes on."""
        try:
            self.waiting.append(self._new_req(message))
        except Exception as error:
            reason = str(error) if isinstance(error, RequestError) else f"{type(error).__name__}: {error}"
            self.io.send([TokenOutput(message.uid, [], True, "error", reason)])

    def _new_req(self, message: GenerateRequest) -> Req:
        """The prompt rules were checked before rank 0 (`check_request`); only the KV capacity is
        known here alone."""
        max_total = self.kv.max_total_len(len(message.input_ids), message.sampling.max_tokens)
        seed = message.sampling.seed if message.sampling.seed is not None else self.config.seed + message.uid
        generator = torch.Generator().manual_seed(seed)  # the same draws on every rank (engine/sampler.py)
        return Req(message.uid, list(message.input_ids), message.sampling, max_total, generator=generator)

    def _abort(self, uid: int) -> None:
        for req in [*self.waiting, *self.prefilling, *self.running.values()]:
            if req.uid == uid:
                self._finish(req)
                self.io.send([TokenOutput(uid, [], True, "abort")])
                return

    # ---- scheduling -----------------------------------------------------------------------
    def _schedule_prefill(self) -> Batch | None:
        budget = self.config.max_prefill_tokens
        reqs: list[Req] = []
        chunks: list[int] = []
        for req in self.prefilling:  # half-prefilled prompts continue first
            if budget == 0:
                break
            chunk = min(req.total_len - req.cached_len, budget)
            reqs.append(req)
            chunks.append(chunk)
            budget -= chunk
        reserved = sum(self.kv.reserve(r) for r in chain(self.prefilling, self.running.values()))
        admitted: list[Req] = []
        while budget > 0 and self.waiting and self._num_admitted() < self.config.max_running_requests:
            req = self.waiting[0]
            if self.cache.should_wait(req, admitted) or not self.kv.admit(req, reserved):
                break  # FIFO: later requests wait behind this one, for its prefix to be cached or pages to free
            self.waiting.popleft()
            self.prefilling.append(req)
            admitted.append(req)
            reserved += self.kv.reserve(req)
            chunk = min(req.total_len - req.cached_len, budget)
            reqs.append(req)
            chunks.append(chunk)
            budget -= chunk
        if not reqs:
            return None
        return make_prefill_batch(reqs, chunks, self.pool, HOST)

    def _schedule_decode(self) -> Batch | None:
        reqs = self._decodable()
        if self.kv.missing_pages(reqs) > self.cache.available and self.pending is not None:
            self._complete_pending()  # retract only requests whose every token is known
            reqs = self._decodable()
        retracted: list[Req] = []
        while reqs and self.kv.missing_pages(reqs) > self.cache.available:
            victim = next(r for r in reversed(self.running.values()) if r in reqs)  # the most recently admitted
            self._retract(victim)
            retracted.append(victim)
            reqs = [r for r in reqs if r is not victim]
        if retracted:
            self.kv.retracted()
            if self.config.world_rank == 0:  # one line, not one per rank (or pipeline stage)
                logger.warning(
                    "KV cache full: retracted request(s) %s (%d tokens) to the waiting queue, to be computed again; "
                    "%d running", ", ".join(str(r.uid) for r in retracted), sum(r.total_len for r in retracted),
                    len(self.running))
        if not reqs:
            return None
        self.kv.grow(reqs)
        return make_decode_batch(reqs, self.pool, HOST)

    def _decodable(self) -> list[Req]:
        # same order on every rank; a request already at its length limit only awaits its last token
        reqs = [r for r in self.running.values() if not self._at_length_limit(r, len(r.output_ids))]
        return sorted(reqs, key=lambda r: r.uid)

    def _num_admitted(self) -> int:
        return len(self.prefilling) + len(self.running)

    # ---- results --------------------------------------------------------------------------
    def _advance(self, batch: Batch) -> list[tuple[int, Req, int]]:
        """What a step does to the requests before its tokens are known: KV progress, prefill ->
        decode, and a placeholder output slot. Returns (batch row, request, slot index) per token."""
        expecting: list[tuple[int, Req, int]] = []
        for row, (req, extend, emits) in enumerate(zip(batch.reqs, batch.extend_lens, batch.emits)):
            req.cached_len += extend
            if not emits:
                continue  # a middle chunk: its sample is meaningless, the prompt goes on next step
            if batch.phase == "prefill":
                self.prefilling.remove(req)
                self.running[req.uid] = req
                self.cache.cache_prompt(req)  # requests admitted from now on may share it
            req.output_ids.append(-(row + 1))  # placeholder: token `row` of this step
            expecting.append((row, req, len(req.output_ids) - 1))
        return expecting

    def _complete(self, expecting: list[tuple[int, Req, int]], tokens: list[int], step: int) -> list[TokenOutput]:
        """Fill in the tokens of step number `step`, finish requests, and build their outputs."""
        outputs: list[TokenOutput] = []
        for row, req, index in expecting:
            if self.running.get(req.uid) is not req:
                continue  # finished or aborted while this step ran (overlap): the token is dropped
            if req.failure is not None:  # its sampling failed: this request ends, the others go on
                self._finish(req)
                outputs.append(TokenOutput(req.uid, [], True, "error", req.failure))
                continue
            token = tokens[row]
            req.output_ids[index] = token
            self.num_generated += 1
            reason = self._finish_reason(req, token, num_output=index + 1)
            if reason is not None:
                del req.output_ids[index + 1 :]  # placeholders of a step launched meanwhile
                self._finish(req)
            outputs.append(TokenOutput(req.uid, [token], reason is not None, reason))
        if TRACE.enabled:
            TRACE.instant("tokens", "batch", step=step, uids=[o.uid for o in outputs],
                          tokens=[o.token_ids[0] if o.token_ids else None for o in outputs])
        return outputs

    def _finish_reason(self, req: Req, token: int, num_output: int) -> str | None:
        params = req.sampling
        if (token in self.eos_ids and not params.ignore_eos) or token in params.stop_token_ids:
            return "stop"
        if self._at_length_limit(req, num_output):
            return "length"
        return None

    @staticmethod
    def _at_length_limit(req: Req, num_output: int) -> bool:
        """`num_output` outputs (with overlap, the last may still be a placeholder) end `req`."""
        return num_output >= req.sampling.max_tokens or len(req.input_ids) + num_output >= req.max_total_len

    def _finish(self, req: Req) -> None:
        """Forget `req` wherever it is and give its KV pages back (to the prefix cache, which keeps
        what later requests may reuse)."""
        if req in self.waiting:
            self.waiting.remove(req)  # holds no pages (never admitted, or retracted)
            return
        if req in self.prefilling:
            self.prefilling.remove(req)
        self.running.pop(req.uid, None)
        self._release_kv(req)

    def _retract(self, req: Req) -> None:
        """Back to the front of the queue without its KV; its tokens so far are computed again on
        re-admission, and its generator carries on where it was."""
        del self.running[req.uid]
        self._release_kv(req)
        self.waiting.appendleft(req)
        self.num_retracted += 1

    def _release_kv(self, req: Req) -> None:
        self.engine.release(req)  # its page-table row: the pages change
        self.cache.release(req)


class StepFailed(RuntimeError):
    """A forward step raised: this rank stops. The message names the step's requests, in case one
    of them caused it."""


@contextmanager
def _naming_requests(step: str, reqs: Iterable[Req]) -> Iterator[None]:
    try:
        yield
    except Exception as error:
        uids = ", ".join(str(req.uid) for req in reqs)
        first_line = str(error).splitlines()[0] if str(error) else ""
        raise StepFailed(f"{step} of request(s) {uids} failed: {type(error).__name__}: {first_line}") from error
