"""minisgl: a small, readable LLM inference engine with tensor parallelism, on CPU and GPU.

`from minisgl import LLM, SamplingParams` is the offline API; `python -m minisgl` the server.
"""

from .core import SamplingParams
from .llm import LLM, RequestOutput

__all__ = ["LLM", "RequestOutput", "SamplingParams"]
