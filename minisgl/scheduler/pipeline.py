"""The scheduler of a pipeline stage (chapter 13): every rank of every stage runs the same
scheduler, one step behind the stage before it, and keeps up to `pp_size` micro-batches in flight
so that all stages compute at once.

Message flow, per step (rank r of each stage talks to rank r of its neighbours):

    tokenizer -> stage 0 rank 0 --broadcast (chapter 06)--> stage 0 ranks
    stage s ---StageStep: this step's messages + completed tokens---> stage s + 1
    stage s ---activations [2, tokens, hidden] of the step's batch---> stage s + 1
    last stage ---StageStep: the sampled tokens of the batch---> stage 0  (read `pp_size` steps later)

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

from minisgl.core import Req
from minisgl.distributed import (
    recv_step_from_prev_stage,
    recv_tokens_from_last_stage,
    send_step_to_next_stage,
    send_tokens_to_first_stage,
)
from minisgl.engine.engine import Engine
from minisgl.message import Message, SchedulerStats, StageStep, TokenOutput, decode_message, encode_message

from .config import SchedulerConfig
from .io import SchedulerIO
from .scheduler import Scheduler, _naming_requests


class PipelineScheduler(Scheduler):
    """`Scheduler` with micro-batches in flight across the stages of `engine.stage`'s pipeline."""

    def __init__(self, config: SchedulerConfig, engine: Engine, io: SchedulerIO) -> None:
        super().__init__(config, engine, io)
        self.stage = engine.stage
        # launched micro-batches, oldest first: (batch row, request, output slot) of each token to come
        # launched micro-batches, oldest first: (batch row, request, slot index) per token, and the step number
        self.in_flight: deque[tuple[list[tuple[int, Req, int]], int]] = deque()
        self.launched = False  # whether the previous step launched a micro-batch

    def run_forever(self) -> None:
        super().run_forever()
        if self.stage.is_first:  # micro-batches still in flight ran on every stage: take their tokens
            for _ in self.in_flight:
                recv_tokens_from_last_stage()
        self.in_flight.clear()

    def step(self) -> None:
        messages, step = self._take_step()
        if not self.stage.is_last:
            send_step_to_next_stage(encode_message(step))
        for message in messages:
            self._handle(message)
        if step.tokens is not None:
            self._complete_oldest(step)
        batch = self._schedule_prefill() or self._schedule_decode()
        self.launched = batch is not None
        if batch is not None:
            with _naming_requests(f"a {batch.phase} step", batch.reqs):
                tokens = self.engine.forward_stage(batch)
            if tokens is not None:  # the last stage sampled them
                failures = {row: req.failure for row, req in enumerate(batch.reqs) if req.failure is not None}
                send_tokens_to_first_stage(encode_message(StageStep(tokens=tokens, failures=failures)))
            self.num_steps += 1
            self.in_flight.append((self._advance(batch), self.num_steps))
        self._send_stats_now_and_then()

    def _take_step(self) -> tuple[list[Message], StageStep]:
        """The first stage: its new messages, and the oldest micro-batch's tokens when it must wait
        for them. A later stage: the same, from the stage before it."""
        if not self.stage.is_first:
            step = decode_message(recv_step_from_prev_stage())
            return [decode_message(raw) for raw in step.messages], step
        messages = self.io.receive(blocking=not self.has_work and not self.in_flight)
        step = StageStep([encode_message(m) for m in messages])
        if self.in_flight and (len(self.in_flight) == self.stage.size or not self.launched):
            returned = decode_message(recv_tokens_from_last_stage())
            step.tokens, step.failures = returned.tokens, returned.failures
        return messages, step

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


class DownstreamIO:
    """The `SchedulerIO` of a stage after the first: its messages arrive with the previous stage's
    `StageStep`, and the first stage's rank 0 answers the frontend."""

    def receive(self, blocking: bool) -> list[Message]:
        return []

    def send(self, outputs: list[TokenOutput]) -> None:
        pass

    def send_stats(self, stats: SchedulerStats) -> None:
        pass

    def close(self) -> None:
        pass
