"""The offline Python API: `LLM(...).generate(...)` and `.chat(...)`."""

from .llm import LLM, RequestOutput

__all__ = ["LLM", "RequestOutput"]
