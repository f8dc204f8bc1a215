"""The scheduler of a pipeline stage (chapter 13): every rank of every stage runs the same
scheduler, one step behind the stage before it, and keeps up to `pp_size` micro-batches in flight
so that all stages compute at once.

Message flow, per step (rank r of each stage talks to rank r of its neighbours):

    tokenizer -> stage 0 rank 0 --broadcast (chapter 06)--> stage 0 ranks
    stage s ---StageStep: this step's messages + completed tokens---> stage s + 1
    stage s ---activations [2, tokens, hidden] of the step's batch---> stage s + 1
    last stage ---StageStep: the sampled tokens of the batch---> stage 0  (read `pp_size` steps later)

The `StageStep`s travel through `StageIO`, the stage's `SchedulerIO`, so the scheduler never
encodes a message or calls a send itself; the activations, through the engine (`forward_stage`).
Only the first stage decides *when* a micro-batch completes: once `pp_size` are in flight (or the
previous step launched none), it waits for the oldest one's tokens, and forwards them with the
step's messages. Every later stage applies the same messages and tokens in the same order, so all
take the same decisions (batches, KV pages, finishes) without another collective; each builds the
batch itself and needs from its predecessor only the activations.

A micro-batch holds at most ceil(running / pp_size) decoding requests, and a request waiting for
its token is in no other batch, so `pp_size` micro-batches share the running requests. A prompt's
next chunk may follow its previous one while it is in flight: each stage runs batches in order, so
the earlier chunk's K/V is written before the later one reads it.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from minisgl.config import SchedulerConfig
from minisgl.core import Req
from minisgl.distributed import (
    recv_step_from_prev_stage,
    recv_tokens_from_last_stage,
    send_step_to_next_stage,
    send_tokens_to_first_stage,
)
from minisgl.message import Message, SchedulerStats, StageStep, TokenOutput, decode_message, encode_message
from minisgl.models.stage import PipelineStage

from .io import SchedulerIO
from .scheduler import Scheduler, _naming_requests

if TYPE_CHECKING:
    from minisgl.engine.engine import Engine


class PipelineScheduler(Scheduler):
    """`Scheduler` with micro-batches in flight across the stages of `engine.stage`'s pipeline."""

    def __init__(self, config: SchedulerConfig, engine: Engine, io: StageIO) -> None:
        super().__init__(config, engine, io)
        self.io: StageIO = io
        self.stage = engine.stage
        # launched micro-batches, oldest first: (batch row, request, slot index) per token, and the step number
        self.in_flight: deque[tuple[list[tuple[int, Req, int]], int]] = deque()
        self.launched = False  # whether the previous step launched a micro-batch

    def run_forever(self) -> None:
        super().run_forever()
        self.io.drain(len(self.in_flight))  # micro-batches still in flight ran on every stage: their tokens
        self.in_flight.clear()

    def step(self) -> None:
        for message in self.io.receive(blocking=not self.has_work and not self.in_flight):
            self._handle(message)
        # the first stage waits for the oldest micro-batch once pp_size are in flight, or none was launched
        wait = bool(self.in_flight) and (len(self.in_flight) == self.stage.size or not self.launched)
        returned = self.io.pass_on(wait_for_tokens=wait)
        if returned is not None:
            self._complete_oldest(returned)
        batch = self._schedule_prefill() or self._schedule_decode()
        self.launched = batch is not None
        if batch is not None:
            with _naming_requests(f"a {batch.phase} step", batch.reqs):
                tokens = self.engine.forward_stage(batch)
            if tokens is not None:  # the last stage sampled them
                self.io.return_tokens(tokens, {row: req.failure for row, req in enumerate(batch.reqs)
                                               if req.failure is not None})
            self.num_steps += 1
            self.in_flight.append((self._advance(batch), self.num_steps))
        self._send_stats_now_and_then()

    def _complete_oldest(self, step: StageStep) -> None:
        expecting, number = self.in_flight.popleft()
        for row, req, _ in expecting:
            if row in step.failures:
                req.failure = step.failures[row]  # the last stage's sampler failed this row
        self.io.send(self._complete(expecting, step.tokens or [], number))

    def _decodable(self) -> list[Req]:
        busy = {req.uid for expecting, _ in self.in_flight for _, req, _ in expecting}
        reqs = [r for r in super()._decodable() if r.uid not in busy]
        share = -(-len(self.running) // self.stage.size)  # ceil: pp_size micro-batches share the running ones
        return reqs[:share]


class StageIO:
    """The `SchedulerIO` of a pipeline stage. Every stage receives the same messages in the same
    order: the first from the frontend (`frontend`, its `ZmqIO`), a later one from the stage before
    it in a `StageStep`, which each stage passes on with the tokens of the micro-batch the first
    stage completed in this step. Only the first stage answers the frontend."""

    def __init__(self, stage: PipelineStage, frontend: SchedulerIO | None) -> None:
        self.stage = stage
        self.frontend = frontend
        self.step = StageStep()  # this step's, until `pass_on`

    def receive(self, blocking: bool) -> list[Message]:
        if self.stage.is_first:
            messages = self.frontend.receive(blocking)
            self.step = StageStep([encode_message(m) for m in messages])
            return messages
        self.step = decode_message(recv_step_from_prev_stage())
        return [decode_message(raw) for raw in self.step.messages]

    def pass_on(self, wait_for_tokens: bool) -> StageStep | None:
        """This step's messages on to the next stage, with the tokens of the oldest micro-batch in
        flight when the first stage waits for them (`wait_for_tokens`): returned here too (or None)."""
        step = self.step
        if self.stage.is_first and wait_for_tokens:
            returned = decode_message(recv_tokens_from_last_stage())
            step.tokens, step.failures = returned.tokens, returned.failures
        if not self.stage.is_last:
            send_step_to_next_stage(encode_message(step))
        return step if step.tokens is not None else None

    def return_tokens(self, tokens: list[int], failures: dict[int, str]) -> None:
        """The last stage: a micro-batch's tokens (and the rows whose sampling failed) to the first."""
        send_tokens_to_first_stage(encode_message(StageStep(tokens=tokens, failures=failures)))

    def drain(self, in_flight: int) -> None:
        """The first stage, leaving: take the tokens of the micro-batches still in flight."""
        for _ in range(in_flight if self.stage.is_first else 0):
            recv_tokens_from_last_stage()

    def send(self, outputs: list[TokenOutput]) -> None:
        if self.frontend is not None:
            self.frontend.send(outputs)

    def send_stats(self, stats: SchedulerStats) -> None:
        if self.frontend is not None:
            self.frontend.send_stats(stats)

    def close(self) -> None:
        if self.frontend is not None:
            self.frontend.close()
