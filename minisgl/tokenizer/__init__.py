"""The server's text side: tokenizer workers and the incremental detokenizer (chapter 02)."""

from .detokenize import Detokenizer, IncrementalDecoder, TextStream
from .tokenize import PromptTokenizer, encode_chat, encode_text

__all__ = ["Detokenizer", "IncrementalDecoder", "PromptTokenizer", "TextStream", "encode_chat", "encode_text"]
