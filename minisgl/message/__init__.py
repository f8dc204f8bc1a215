"""Typed messages that cross process boundaries, their msgpack wire format, the ZMQ queues that
carry them and the addresses of those queues (chapters 02 and 06)."""

from .addresses import IpcAddresses
from .messages import (
    AbortRequest,
    FinishedRequests,
    GenerateRequest,
    Message,
    SchedulerStats,
    ShutdownRequest,
    StageStep,
    TokenOutput,
    decode_message,
    encode_message,
    register_message,
)
from .queues import AsyncPullQueue, PubQueue, PullQueue, PushQueue, SubQueue
from .text import DetokenizeStart, TextOutput, TokenizeRequest

__all__ = [
    "AbortRequest",
    "AsyncPullQueue",
    "DetokenizeStart",
    "FinishedRequests",
    "GenerateRequest",
    "IpcAddresses",
    "Message",
    "PubQueue",
    "PullQueue",
    "PushQueue",
    "SchedulerStats",
    "ShutdownRequest",
    "StageStep",
    "SubQueue",
    "TextOutput",
    "TokenOutput",
    "TokenizeRequest",
    "decode_message",
    "encode_message",
    "register_message",
]
