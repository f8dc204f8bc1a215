"""minisgl: a small, readable LLM inference engine with tensor parallelism, on CPU and GPU.

`from minisgl import LLM, SamplingParams` is the offline API; `python -m minisgl` the server.
The names are imported lazily, so `import minisgl.distributed` in a spawned rank does not pay
for transformers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .core import SamplingParams
    from .llm import LLM, RequestOutput

__all__ = ["LLM", "RequestOutput", "SamplingParams"]


def __getattr__(name: str) -> Any:
    if name == "SamplingParams":
        from .core import SamplingParams

        return SamplingParams
    if name in ("LLM", "RequestOutput"):
        from . import llm

        return getattr(llm, name)
    raise AttributeError(f"module 'minisgl' has no attribute {name!r}")
