"""A multi-turn chat with closed-loop clients, driven through `LLM.submit` / `LLM.collect` (or
`InProcessRun`'s, where the caller wants the scheduler itself): every conversation starts at once,
and each sends its next turn, as the whole conversation so far plus the new user turn, when its
previous answer is complete. Chapter 11 draws the radix tree it leaves behind;
`benchmark/prefix_cache.py` times it with the prefix cache on and off."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol

from minisgl.core import SamplingParams
from minisgl.message import TokenOutput

Conversation = list[list[int]]  # the user's turns, as token ids


class Client(Protocol):
    def submit(self, prompt: list[int], sampling_params: SamplingParams) -> int: ...

    def collect(self) -> list[TokenOutput]: ...


@dataclass
class ChatRun:
    answers: list[list[int]] = field(default_factory=list)  # every answer, in the order they finished
    ttft: list[float] = field(default_factory=list)  # seconds from sending each turn to its first token
    seconds: float = 0.0  # from the first turn sent to the last answer complete


def run_chat(client: Client, conversations: list[Conversation], params: SamplingParams) -> ChatRun:
    """Every conversation's turns through `client`, each turn sent when the previous answer is complete.
    A conversation of one turn is one request: a list of them is a batch sent at once."""
    history: list[list[int]] = [[] for _ in conversations]
    next_turn = [0] * len(conversations)
    waiting: dict[int, tuple[int, float]] = {}  # uid -> (its conversation, when it was sent)
    answers: dict[int, list[int]] = {}
    run = ChatRun()

    def send(c: int) -> None:
        history[c] += conversations[c][next_turn[c]]
        next_turn[c] += 1
        uid = client.submit(list(history[c]), params)
        waiting[uid], answers[uid] = (c, time.perf_counter()), []

    start = time.perf_counter()
    for c in range(len(conversations)):
        send(c)
    while waiting:
        outputs = client.collect()
        now = time.perf_counter()
        for output in outputs:
            if output.error is not None:
                raise ValueError(output.error)
            c, sent = waiting[output.uid]
            if output.token_ids and not answers[output.uid]:
                run.ttft.append(now - sent)
            answers[output.uid] += output.token_ids
            if output.finished:
                del waiting[output.uid]
                history[c] += answers[output.uid]
                run.answers.append(answers[output.uid])
                if next_turn[c] < len(conversations[c]):
                    send(c)
    run.seconds = time.perf_counter() - start
    return run
