"""CPU graphs for decode steps (chapter 10, "CPU graphs"): the CUDA-graph idea on a CPU.

When every computation of a decode step is one of minisgl's C kernels (an fp32 run with 4-bit
GGUF weights on one rank), the step can be recorded as its list of C calls and replayed without
the Python around them (minisgl/kernel/cpu/graph.py). As with CUDA graphs (cuda_graph.py), a
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

from minisgl.attention import AttentionBackend
from minisgl.core import Batch, forward_context
from minisgl.kernel.cpu.graph import CapturedCalls, NotCapturable, capture
from minisgl.layers import BaseOP

from .placeholders import resolve_placeholders

logger = logging.getLogger(__name__)


class CpuGraphRunner:
    def __init__(self, model: BaseOP, attn_backend: AttentionBackend, max_bs: int,
                 future_tokens: torch.Tensor | None) -> None:
        self.model = model
        self.attn_backend = attn_backend
        # the engine's last greedy tokens, which fill placeholder ids (placeholders.py); None: the
        # engine runs without the overlap schedule, so no batch holds a placeholder
        self.future_tokens = future_tokens
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
        """Copy `batch` into the static buffers its graph reads."""
        bs = batch.size
        if self.future_tokens is not None:
            resolve_placeholders(batch.input_ids, self.future_tokens)  # last step's tokens, in place
        self.inputs[:, :bs] = torch.stack([batch.input_ids, batch.positions, batch.out_slots])
        self.attn_backend.prepare_graph_replay(batch, bs)

    def _static_batch(self, bs: int) -> Batch:
        return Batch.graph_decode(self.inputs, self.last_indices, bs, self.attn_backend.graph_metadata(bs))
