"""Record a forward's C kernel calls once, replay them on later steps: the CPU's counterpart of a
CUDA graph (chapter 16, "CPU graphs"; graphs.py runs them for the engine).

A decode step of a small model on the CPU is a few hundred calls into minisgl's C kernels (four
quantized matmuls, two norms, RoPE, attention and SiLU per layer). The C work of one call is a few
microseconds to a few tens; the Python around it (layer methods, checks, output allocation, ctypes
conversions) costs more than half as much again: for a 135M model, over a third of the step.
Inside `capture()`, every call `CpuKernels` makes is also written down: the C function and its
arguments, which are raw addresses and sizes. `CapturedCalls.replay()` makes the same calls again,
in order, and runs nothing else.

Nothing else: so capture must prove that nothing else happened. Every PyTorch operation of the
captured forward passes through a dispatch mode that lets through only operations that compute
nothing (views, dtype no-ops, `empty`) and raises `NotCapturable` naming the first one that does
(a dense F.linear, an all-reduce, an index). The mode also keeps every tensor the forward creates:
their addresses are baked into the recorded calls, as a CUDA graph's memory pool keeps its
activations alive between replays.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

# Allocation without computing: the outputs a kernel wrapper creates for its C function to fill.
_ALLOCATIONS = {torch.ops.aten.empty.memory_format, torch.ops.aten.empty_strided.default}


class NotCapturable(RuntimeError):
    """The captured forward ran a PyTorch operation that computes: a replay would skip it."""


@dataclass
class CapturedCalls:
    """The C calls of one captured forward, and every tensor it created (kept alive for replays)."""

    calls: list[tuple[Callable[..., Any], tuple[Any, ...]]] = field(default_factory=list)
    tensors: list[torch.Tensor] = field(default_factory=list)

    def replay(self) -> None:
        """Run the recorded calls again on whatever their buffers now hold."""
        for function, args in self.calls:
            refused = function(*args)  # None from void kernels; a kernel that can fail counts bad inputs
            if refused:
                raise RuntimeError(f"C kernel {function.__name__} refused {refused} of its inputs on replay")


_capturing: CapturedCalls | None = None


def record_call(function: Callable[..., Any], args: tuple[Any, ...]) -> None:
    """Called by every kernel wrapper after its C call: written down while a capture is on, its
    arguments converted to their ctypes types once (a replay then skips that step: ~1 us per call)."""
    if _capturing is not None:
        _capturing.calls.append((function, tuple(ctype(arg) for ctype, arg in zip(function.argtypes, args))))


@contextmanager
def capture() -> Iterator[CapturedCalls]:
    """Record the C calls of the code inside; raises `NotCapturable` if that code computes anything
    with PyTorch."""
    global _capturing
    if _capturing is not None:
        raise RuntimeError("a capture is already running")
    _capturing = calls = CapturedCalls()
    try:
        with _OnlyCCompute(calls.tensors):
            yield calls
    finally:
        _capturing = None


class _OnlyCCompute(TorchDispatchMode):
    """Let through the PyTorch operations that compute nothing; keep every tensor they return."""

    def __init__(self, keep: list[torch.Tensor]) -> None:
        super().__init__()
        self.keep = keep

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001 (PyTorch's signature)
        out = func(*args, **(kwargs or {}))
        if not computes_nothing(func, args, kwargs or {}, out):
            raise NotCapturable(f"{func} computes outside minisgl's C kernels")
        self.keep.extend(t for t in tree_leaves(out) if isinstance(t, torch.Tensor))
        return out


def computes_nothing(func: torch._ops.OpOverload, args: tuple, kwargs: dict, out: Any) -> bool:
    """True for an allocation, or an operation that writes nothing and returns only views of its
    inputs (view, split, select, detach, a `.to` that is a no-op)."""
    if func in _ALLOCATIONS:
        return True
    if any(arg.alias_info is not None and arg.alias_info.is_write for arg in func._schema.arguments):
        return False  # in place (copy_, add_, index_copy_): writes a tensor
    inputs = {_storage_address(t) for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)} - {None}
    outputs = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
    return all(_storage_address(t) in inputs for t in outputs)


def _storage_address(t: torch.Tensor) -> int | None:
    """Where t's storage starts; None for tensors without one (oneDNN's prepacked weights)."""
    try:
        return t.untyped_storage().data_ptr()
    except NotImplementedError:
        return None
