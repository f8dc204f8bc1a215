"""The offline Python API: `LLM(...).generate(...)` and `.chat(...)` (chapter 00)."""

from .llm import LLM, RequestOutput

__all__ = ["LLM", "RequestOutput"]
