"""The server's text side: tokenizer workers and the incremental detokenizer (chapter 02)."""

from .detokenize import Detokenizer, IncrementalDecoder, TextStream
from .tokenize import PromptError, PromptTokenizer

__all__ = ["Detokenizer", "IncrementalDecoder", "PromptError", "PromptTokenizer", "TextStream"]
