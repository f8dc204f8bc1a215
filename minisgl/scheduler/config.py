"""`SchedulerConfig`: the engine's config plus the batching and caching choices of one rank
(chapters 02 and 11)."""

from __future__ import annotations

from dataclasses import dataclass

from minisgl.engine.config import EngineConfig


@dataclass
class SchedulerConfig(EngineConfig):
    max_prefill_tokens: int = 2048  # token budget of one prefill step; longer prompts are chunked
    cache: str = "radix"  # "radix": requests reuse the KV of cached prefixes; "naive": every prompt computed whole
