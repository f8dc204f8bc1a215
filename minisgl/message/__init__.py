"""Typed messages that cross process boundaries, and their msgpack wire format (chapter 06)."""

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
    "GenerateRequest",
    "Message",
    "ShutdownRequest",
    "TokenOutput",
    "decode_message",
    "encode_message",
    "register_message",
]
