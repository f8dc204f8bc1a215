"""`SchedulerConfig`: the engine's config plus batching limits and the ZMQ addresses of one run."""

from __future__ import annotations

from dataclasses import dataclass

from minisgl.engine.config import EngineConfig


@dataclass
class SchedulerConfig(EngineConfig):
    max_prefill_tokens: int = 2048  # token budget of one prefill step; longer prompts are chunked
    # ZMQ endpoints (ipc:// paths, filled by the launcher): frontend -> rank 0, rank 0 -> frontend,
    # rank 0 -> other ranks.
    requests_addr: str = ""
    outputs_addr: str = ""
    broadcast_addr: str = ""
