"""`LocalIO`: the `SchedulerIO` of a scheduler driven in this process, two in-memory lists (the
offline `LLM` at tp = 1, chapters 00 and 06)."""

from __future__ import annotations

from collections import deque

from minisgl.message import Message, SchedulerStats, TokenOutput


class LocalIO:
    def __init__(self) -> None:
        self.inbox: deque[Message] = deque()
        self.outbox: list[TokenOutput] = []
        self.stats: SchedulerStats | None = None  # the latest

    def receive(self, blocking: bool) -> list[Message]:
        messages = list(self.inbox)
        self.inbox.clear()
        return messages

    def send(self, outputs: list[TokenOutput]) -> None:
        self.outbox.extend(outputs)

    def send_stats(self, stats: SchedulerStats) -> None:
        self.stats = stats

    def close(self) -> None:
        pass
