"""The attention-backend interface every backend subclasses, and the factory that picks one by name
(chapters 07 and 10).

The engine calls `prepare` once per batch and `release` when a request finishes; each attention
layer calls `forward`. A backend that can run inside a CUDA graph says so (`supports_cuda_graph`),
one that can run inside a CPU graph of C calls too (`supports_cpu_graph`), and implements the three
graph hooks `engine/cuda_graph.py` and `cpu/graphs.py` call; the engine asks these flags,
never probes for methods.
"""

from __future__ import annotations

import importlib.util
import os
from abc import ABC, abstractmethod
from typing import Any, ClassVar

import torch

from minisgl.core import Batch, Req
from minisgl.kvcache import KVCachePool

BACKENDS = ("auto", "torch", "triton", "flashinfer")
FLASHINFER_PIN = "flashinfer-python==0.6.18.post1"  # the version benchmark/run_gpu_suite.sh tests (carried wheel)


class AttentionBackend(ABC):
    supports_cuda_graph: ClassVar[bool] = False  # True: the three graph hooks below serve CUDA graphs
    supports_cpu_graph: ClassVar[bool] = False  # True: they serve CPU graphs (decode in C kernels only)

    @abstractmethod
    def prepare(self, batch: Batch) -> None:
        """Build per-batch metadata (index tables, masks) once, before the layers run; it goes in
        `batch.attn_metadata`."""

    @abstractmethod
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer_id: int, batch: Batch) -> torch.Tensor:
        """Store the new k, v in the pool, attend: q [tokens, q_heads, d] -> [tokens, q_heads, d]."""

    def forward_rope(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer_id: int, batch: Batch,
                     positions: torch.Tensor, cos_sin: torch.Tensor,
                     qk_norm: tuple[torch.Tensor, torch.Tensor, float] | None = None) -> torch.Tensor | None:
        """`forward` on q and k before their RoPE (cos_sin [max_position, d], minisgl/layers/rotary.py)
        and, with qk_norm = (q weight, k weight, eps), before Qwen3's per-head RMSNorm, for a backend
        whose kernel does that work itself (a GPU plug-in's fused layer calls it, chapter 10). None
        where it does not, for this batch or at all (the default): the caller then applies them and
        calls `forward`."""
        return None

    def release(self, req: Req) -> None:
        """`req` finished: drop whatever this backend keeps per request (nothing, by default)."""

    # ---- graphs (engine/cuda_graph.py, cpu/graphs.py), where `supports_*_graph` ---------------------
    def init_graph_buffers(self, max_bs: int) -> None:
        """Allocate the static buffers that every graph, up to batch size `max_bs`, reads."""
        raise NotImplementedError(f"{type(self).__name__} does not run in graphs")

    def graph_metadata(self, bs: int) -> Any:
        """The `attn_metadata` a graph of `bs` rows is captured with (views of the static buffers)."""
        raise NotImplementedError(f"{type(self).__name__} does not run in graphs")

    def prepare_graph_replay(self, batch: Batch, bucket: int) -> None:
        """Write `batch` into the static buffers of the graph of `bucket` rows, padding the rest (a
        CPU graph is captured for each batch size: `bucket` is the batch's own size)."""
        raise NotImplementedError(f"{type(self).__name__} does not run in graphs")


def resolve_attention_backend(name: str, device: torch.device) -> str:
    """`auto` is Triton on CUDA (when triton is installed) and torch elsewhere. FlashInfer is never
    picked by `auto`: it is an optional package that compiles its kernels on first use."""
    if name not in BACKENDS:
        raise ValueError(f"unknown attention backend {name!r}; available: {', '.join(BACKENDS)}")
    has_triton = importlib.util.find_spec("triton") is not None
    if name == "auto":
        return "triton" if device.type == "cuda" and has_triton else "torch"
    if name == "triton":
        if not has_triton:
            raise ValueError("attention backend 'triton' needs the triton package: pip install triton")
        if device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
            raise ValueError("attention backend 'triton' runs on CUDA; on a CPU use 'torch' (or TRITON_INTERPRET=1)")
    if name == "flashinfer":
        if device.type != "cuda":
            raise ValueError("attention backend 'flashinfer' runs on CUDA only; on a CPU use 'torch'")
        if importlib.util.find_spec("flashinfer") is None:
            raise ValueError(
                f"attention backend 'flashinfer' needs the flashinfer-python package: pip install {FLASHINFER_PIN} "
                "(optional; it compiles its kernels with nvcc on first use), or use 'triton'"
            )
    return name


def create_attention_backend(
    name: str, pool: KVCachePool, device: torch.device, max_seq_len: int, max_requests: int, local_q_heads: int = 0,
    batch_invariant: bool = False,
) -> AttentionBackend:
    """`max_seq_len` and `max_requests` size the device page table of the Triton and FlashInfer
    backends; FlashInfer also plans with the number of query heads on this rank. `batch_invariant`
    (--deterministic) takes the fixed-tile torch backend."""
    name = resolve_attention_backend(name, device)
    if batch_invariant:
        if name != "torch":
            raise ValueError(f"--deterministic runs attention in its own batch-invariant torch backend; "
                             f"it cannot use the {name!r} backend")
        from .batch_invariant import BatchInvariantAttentionBackend

        return BatchInvariantAttentionBackend(pool)
    if name == "flashinfer":
        if local_q_heads <= 0:
            raise ValueError("the flashinfer attention backend needs local_q_heads (query heads on this rank)")
        from .flashinfer_backend import FlashInferAttentionBackend

        return FlashInferAttentionBackend(pool, device, max_seq_len, max_requests, local_q_heads)
    if name == "triton":
        from .triton_backend import TritonAttentionBackend

        return TritonAttentionBackend(pool, device, max_seq_len, max_requests)
    from .torch_backend import TorchAttentionBackend

    return TorchAttentionBackend(pool, max_seq_len)
