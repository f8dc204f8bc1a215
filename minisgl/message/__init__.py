"""Typed messages that cross process boundaries, and their msgpack wire format (chapter 06)."""

from .frontend import DetokenizeStart, TextOutput, TokenizeRequest
from .messages import (
    AbortRequest,
    GenerateRequest,
    Message,
    ShutdownRequest,
    TokenOutput,
    decode_message,
    encode_message,
    register_message,
)

__all__ = [
    "AbortRequest",
    "DetokenizeStart",
    "GenerateRequest",
    "Message",
    "ShutdownRequest",
    "TextOutput",
    "TokenOutput",
    "TokenizeRequest",
    "decode_message",
    "encode_message",
    "register_message",
]
