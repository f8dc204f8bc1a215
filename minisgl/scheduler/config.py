"""`SchedulerConfig`: the engine's config plus the batching limits of one rank (chapter 02)."""

from __future__ import annotations

from dataclasses import dataclass

from minisgl.engine.config import EngineConfig


@dataclass
class SchedulerConfig(EngineConfig):
    max_prefill_tokens: int = 2048  # token budget of one prefill step; longer prompts are chunked
