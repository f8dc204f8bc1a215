"""CPU graphs for decode steps (chapter 16, "CPU graphs"): the CUDA-graph idea on a CPU.

When every computation of a decode step is one of minisgl's C kernels (an fp32 run with 4-bit
GGUF weights on one rank), the step can be recorded as its list of C calls and replayed without
the Python around them (capture.py). As with CUDA graphs (minisgl/engine/cuda_graph.py), a
replay repeats fixed addresses and fixed shapes, so:
- the inputs live in static buffers each step overwrites: token ids, positions, out slots here, the
  slot table and lengths in the attention backend;
- each batch size gets its own recording, made on its first decode step (that step's real forward
  is the recording run: no warm-up, no padding rows, no buckets);
- the recording keeps every tensor the forward created, so a replay writes where it wrote before.
The capture refuses a forward that runs any PyTorch computation (a replay would skip it). The first
batch size refused caps the graphs there: sizes above it would only add more such work (above the
quantized kernels' row limit the layers take dense matmuls), so they run eagerly without trying.
"""

from __future__ import annotations

import logging

import torch

from minisgl.core import AttentionHooks, Batch, forward_context
from minisgl.distributed import COMM_COUNTER
from minisgl.layers import BaseOP

from .capture import CapturedCalls, NotCapturable, capture
from .kernels import cpu_kernels
from .prepacked import matmuls_on_amx_tiles
from .settings import CpuSettings

logger = logging.getLogger(__name__)


def cpu_graph_runner(model: BaseOP, attn_backend: AttentionHooks, settings: CpuSettings) -> CpuGraphRunner | None:
    """CPU graphs where a decode step can be all C calls: one rank (a collective is not a C call),
    one stage, fp32 activations with the C kernels built, an attention backend that serves them,
    and matmuls in C: GGUF weights (up to `max_quantized_rows` rows) or bf16 AMX tiles (every
    batch; oneDNN's matmuls are PyTorch ops). That the step's layers then call nothing but C is
    what capture itself checks (batches above `max_quantized_rows` without AMX tiles take oneDNN's
    dense matmuls, and run eagerly)."""
    dense_in_c = matmuls_on_amx_tiles(getattr(torch, settings.matmul_dtype))
    max_bs = settings.cpu_graph_max_bs
    if max_bs is None:  # every batch whose matmuls are C calls
        quantized_only = settings.max_quantized_rows if not dense_in_c else None
        max_bs = min(settings.max_running_requests, quantized_only or settings.max_running_requests)
    if max_bs <= 0 or settings.world_size > 1 or settings.tp_ops is not None or COMM_COUNTER.counting:
        return None
    if not (settings.quantization == "gguf" or dense_in_c) or settings.dtype != "float32" or cpu_kernels() is None:
        return None
    if not attn_backend.supports_cpu_graph:
        return None
    return CpuGraphRunner(model, attn_backend, max_bs)


class CpuGraphRunner:
    def __init__(self, model: BaseOP, attn_backend: AttentionHooks, max_bs: int) -> None:
        self.model = model
        self.attn_backend = attn_backend
        self.max_bs = max_bs  # lowered to below the first batch size whose forward cannot be captured
        self.inputs = torch.zeros(3, max_bs, dtype=torch.int64)  # token ids, positions, out slots
        self.last_indices = torch.arange(max_bs)  # one logits row per request
        attn_backend.init_graph_buffers(max_bs)
        self.graphs: dict[int, tuple[CapturedCalls, torch.Tensor]] = {}  # bs -> (calls, static logits [bs, vocab])

    def fits(self, batch: Batch) -> bool:
        return batch.phase == "decode" and batch.size <= self.max_bs

    def run(self, batch: Batch) -> torch.Tensor | None:
        """Logits [bs, vocab] of a decode batch (a fresh tensor), by replay, or by the capture run
        on the batch size's first step; None when that capture is refused (run it eagerly)."""
        bs = batch.size
        self._load(batch)
        if bs in self.graphs:
            calls, logits = self.graphs[bs]
            calls.replay()
            return logits.clone()  # the static buffer is overwritten by the next replay
        static = self._static_batch(bs)
        try:
            with capture() as calls, forward_context(static, self.attn_backend):
                logits = self.model.forward(static)  # [bs, vocab]
        except NotCapturable as reason:
            logger.info("decode batches of %d or more requests run eagerly: %s", bs, reason)
            self.max_bs = bs - 1
            return None
        self.graphs[bs] = (calls, logits)
        logger.debug("recorded a CPU graph of %d C calls for decode batches of %d", len(calls.calls), bs)
        return logits.clone()

    def _load(self, batch: Batch) -> None:
        """Copy `batch` into the static buffers its graph reads (its placeholder ids already resolved)."""
        bs = batch.size
        self.inputs[:, :bs] = torch.stack([batch.input_ids, batch.positions, batch.out_slots])
        self.attn_backend.prepare_graph_replay(batch, bs)

    def _static_batch(self, bs: int) -> Batch:
        return Batch.graph_decode(self.inputs, self.last_indices, bs, self.attn_backend.graph_metadata(bs))
