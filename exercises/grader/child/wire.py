"""What crosses between the grader and a sandboxed child process: data, never code.

A value is encoded as JSON with tagged objects for what JSON lacks (tuples, dicts with any keys,
bytes, tensors as dtype + shape + raw bytes, and an `Opaque` stand-in naming the type of anything
else), and framed with an 8-byte length. Nothing is ever unpickled: decoding a message can only
build plain values and CPU tensors, checked for type, size and nesting, so a child that writes
garbage (or a forged message) on its socket gets a `WireError`, never code run in the grader.

Both sides import this file (the child as `grader_child.wire`), so it uses only the standard
library and torch.
"""

from __future__ import annotations

import base64
import json
import math
import socket
import struct
import time
from typing import Any, Callable

MAX_MESSAGE_BYTES = 64 << 20  # a result larger than this is refused, not read (the largest test sends ~1 MiB)
MAX_DEPTH = 32
MAX_DIMS = 8
DTYPES = ("float32", "float64", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool")
_HEADER = struct.Struct(">Q")


class WireError(Exception):
    """A message that is not well-formed data (or too large, or cut short)."""


class Opaque:
    """What the grader sees of a value that is not plain data: its type's name and a short repr.
    It equals nothing, so it fails every comparison a test makes, and its messages name the type."""

    def __init__(self, type_name: str, text: str) -> None:
        self.type_name, self.text = type_name, text

    def __repr__(self) -> str:
        return f"<{self.type_name}: {self.text}>"

    def __eq__(self, other: object) -> bool:
        return False

    __hash__ = None  # type: ignore[assignment]


def type_name(value: Any) -> str:
    """The name of a decoded value's type, an Opaque's original one included."""
    return value.type_name if isinstance(value, Opaque) else type(value).__name__


# ---- encoding ------------------------------------------------------------------------------------
def encode(value: Any, placeholder: Callable[[Any], Any] | None = None, depth: int = 0) -> Any:
    """`value` as JSON-able data. `placeholder(value)` may return a tagged object for values the
    caller knows (the grader's group and device stand-ins), or None."""
    if depth > MAX_DEPTH:
        return _opaque(value, "nested too deeply")
    if placeholder is not None and (tagged := placeholder(value)) is not None:
        return tagged
    kind = type(value)
    if value is None or kind in (bool, int, str):
        return value
    if kind is float:
        return value if math.isfinite(value) else {"$": "float", "v": repr(value)}
    if kind is list:
        return [encode(item, placeholder, depth + 1) for item in value]
    if kind is tuple:
        return {"$": "tuple", "v": [encode(item, placeholder, depth + 1) for item in value]}
    if kind is dict:
        return {"$": "dict", "v": [[encode(k, placeholder, depth + 1), encode(v, placeholder, depth + 1)]
                                   for k, v in value.items()]}
    if kind is bytes:
        return {"$": "bytes", "v": base64.b64encode(value).decode()}
    if _is_tensor(value):
        return _encode_tensor(value)
    return _opaque(value)


def _is_tensor(value: Any) -> bool:
    import torch

    return isinstance(value, torch.Tensor)


def _encode_tensor(tensor: Any) -> Any:
    import torch

    dtype = str(tensor.dtype).removeprefix("torch.")
    if dtype not in DTYPES or tensor.dim() > MAX_DIMS or tensor.layout != torch.strided:
        return _opaque(tensor, f"{dtype} tensor of shape {tuple(tensor.shape)}")
    flat = tensor.detach().to("cpu").contiguous().reshape(-1)
    raw = flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""
    return {"$": "tensor", "dtype": dtype, "shape": list(tensor.shape), "device": tensor.device.type,
            "v": base64.b64encode(raw).decode()}


def _opaque(value: Any, text: str | None = None) -> dict:
    if text is None:
        try:
            text = repr(value)
        except Exception:  # noqa: BLE001 - a learner's __repr__ may raise
            text = "?"
    return {"$": "opaque", "type": type(value).__name__[:80], "v": text[:200]}


# ---- decoding ------------------------------------------------------------------------------------
def decode(data: Any, placeholder: Callable[[str, Any], Any] | None = None, depth: int = 0) -> Any:
    """The value `encode` made; `placeholder(tag, payload)` resolves tags other than the built-in
    ones (a child resolves the grader's stand-ins). Raises WireError on anything else."""
    if depth > MAX_DEPTH:
        raise WireError("nested too deeply")
    if data is None or type(data) in (bool, int, float, str):
        return data
    if type(data) is list:
        return [decode(item, placeholder, depth + 1) for item in data]
    if type(data) is not dict or not isinstance(data.get("$"), str):
        raise WireError(f"not a value: {type(data).__name__}")
    tag, payload = data["$"], data.get("v")
    if tag == "tuple" and type(payload) is list:
        return tuple(decode(item, placeholder, depth + 1) for item in payload)
    if tag == "dict" and type(payload) is list:
        pairs = [decode(pair, placeholder, depth + 1) for pair in payload]
        if not all(type(p) is list and len(p) == 2 for p in pairs):
            raise WireError("a dict is a list of [key, value] pairs")
        try:
            return {k: v for k, v in pairs}
        except TypeError:
            raise WireError("a dict key that cannot be hashed") from None
    if tag == "bytes" and type(payload) is str:
        return _b64(payload)
    if tag == "float" and payload in ("nan", "inf", "-inf"):
        return float(payload)
    if tag == "opaque" and type(payload) is str and type(data.get("type")) is str:
        return Opaque(data["type"][:80], payload[:200])
    if tag == "tensor":
        return _decode_tensor(data)
    if placeholder is not None:
        return placeholder(tag, payload)
    raise WireError(f"unknown tag {tag[:20]!r}")


def _b64(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except ValueError:
        raise WireError("bytes that are not base64") from None


def _decode_tensor(data: dict) -> Any:
    import torch

    dtype, shape, device = data.get("dtype"), data.get("shape"), data.get("device")
    if dtype not in DTYPES or type(shape) is not list or len(shape) > MAX_DIMS or type(device) is not str:
        raise WireError("a tensor needs a known dtype, a shape and a device")
    if not all(type(n) is int and n >= 0 for n in shape):
        raise WireError(f"a tensor's shape must be non-negative ints, got {shape!r:.80}")
    raw = _b64(data.get("v") if type(data.get("v")) is str else "")
    torch_dtype = getattr(torch, dtype)
    numel = math.prod(shape)
    if numel * torch.empty((), dtype=torch_dtype).element_size() != len(raw):
        raise WireError(f"a {dtype} tensor of shape {shape} does not hold {len(raw)} bytes")
    if numel == 0:
        return torch.empty(shape, dtype=torch_dtype)
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(torch_dtype).reshape(shape)


# ---- framing -------------------------------------------------------------------------------------
def send(sock: socket.socket, message: Any) -> None:
    """Send one JSON-able message (already encoded)."""
    body = json.dumps(message, separators=(",", ":")).encode()
    if len(body) > MAX_MESSAGE_BYTES:
        body = json.dumps({"kind": "error", "error": {"type": "WireError", "message": "the result is larger than "
                           f"{MAX_MESSAGE_BYTES >> 20} MiB", "not_implemented": False, "where": []}}).encode()
    sock.sendall(_HEADER.pack(len(body)) + body)


def receive(sock: socket.socket, deadline: float | None = None) -> Any:
    """One message; WireError when the peer closed, sent garbage, or `deadline` (monotonic) passed."""
    (length,) = _HEADER.unpack(_read(sock, _HEADER.size, deadline))
    if length > MAX_MESSAGE_BYTES:
        raise WireError(f"a message of {length} bytes (the limit is {MAX_MESSAGE_BYTES})")
    try:
        return json.loads(_read(sock, length, deadline))
    except (ValueError, RecursionError):
        raise WireError("a message that is not JSON") from None


def _read(sock: socket.socket, count: int, deadline: float | None) -> bytes:
    chunks, got = [], 0
    while got < count:
        if deadline is not None:
            sock.settimeout(max(0.001, deadline - time.monotonic()))
        try:
            chunk = sock.recv(min(count - got, 1 << 20))
        except socket.timeout:
            raise WireError("timed out") from None
        except OSError as error:
            raise WireError(f"closed ({error})") from None
        if not chunk:
            raise WireError("closed")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)
