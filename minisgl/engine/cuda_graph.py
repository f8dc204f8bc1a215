"""CUDA graphs for decode steps (chapter 10).

A decode step of a small model is hundreds of tiny kernels; launching them one by one from Python
costs more than running them. A CUDA graph records the launches of one forward once and replays
them with a single call. A graph replays fixed addresses and fixed shapes, so:
- one graph per batch-size bucket (1, 2, 4, 8, then every 8 up to `max_bs`); a batch of 5 runs in
  the graph of 8, its 3 padding rows reading KV slot 0 (page-table row 0 -> page 0, never handed
  out) and writing nowhere (out slot -1);
- the inputs live in static buffers that each replay overwrites: token ids, positions, out slots
  here, page-table rows and lengths in the attention backend;
- all graphs share one memory pool, captured largest first, so they cost about one forward's
  activations in total;
- a graph also does the overlap schedule's device work around the forward, so a step launches
  nothing else from Python: first it swaps placeholder ids for the previous step's tokens
  (placeholders.py), last it takes the greedy tokens and keeps them for the next step.
Graphs are destroyed before the communicators they captured (`Engine.shutdown`).
"""

from __future__ import annotations

import logging

import torch

from minisgl.attention import AttentionBackend
from minisgl.core import Batch, forward_context
from minisgl.layers import BaseOP

from .placeholders import resolve_placeholders

logger = logging.getLogger(__name__)


def graph_batch_sizes(max_bs: int) -> list[int]:
    """Buckets [1, 2, 4, 8, 16, 24, ...] up to and including `max_bs`."""
    sizes = [bs for bs in (1, 2, 4, 8) if bs < max_bs] + list(range(16, max_bs, 8))
    return sorted(set(sizes) | {max_bs})


class CudaGraphRunner:
    def __init__(
        self, model: BaseOP, attn_backend: AttentionBackend, max_bs: int, device: torch.device,
        future_tokens: torch.Tensor,
    ) -> None:
        self.model = model
        self.future_tokens = future_tokens  # [>= max_bs] int64, the engine's: last step's greedy tokens
        self.attn_backend = attn_backend
        self.batch_sizes = graph_batch_sizes(max_bs)
        self.max_bs = max_bs
        # [3, max_bs]: token ids, positions, out slots (padding: 0, 0, -1)
        self._pad_template = torch.zeros(3, max_bs, dtype=torch.int64)
        self._pad_template[2].fill_(-1)
        self.inputs = self._pad_template.to(device)
        self.last_indices = torch.arange(max_bs, device=device)  # one logits row per request
        attn_backend.init_graph_buffers(max_bs)
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.outputs: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # bs -> static logits [bs, vocab], greedy [bs]
        pool = torch.cuda.graph_pool_handle()
        for bs in reversed(self.batch_sizes):
            self._capture(bs, pool)
        logger.info("captured %d CUDA graphs for decode batch sizes up to %d", len(self.graphs), max_bs)

    def _static_batch(self, bs: int) -> Batch:
        return Batch.graph_decode(self.inputs, self.last_indices, bs, self.attn_backend.graph_metadata(bs))

    def _run(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        resolve_placeholders(batch.input_ids, self.future_tokens)
        with forward_context(batch, self.attn_backend):
            logits = self.model.forward(batch)  # [bs, vocab]
        greedy = torch.argmax(logits.float(), dim=-1)  # [bs], as sample() picks at temperature 0
        self.future_tokens[: greedy.numel()].copy_(greedy)
        return logits, greedy

    def _capture(self, bs: int, pool) -> None:
        batch = self._static_batch(bs)
        # Warm up outside the graph: kernels compile, cuBLAS picks algorithms, lazy tables fill.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            self._run(batch)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool):
            self.outputs[bs] = self._run(batch)
        self.graphs[bs] = graph

    def fits(self, batch: Batch) -> bool:
        return batch.phase == "decode" and batch.size <= self.max_bs

    def run(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits [bs, vocab] and greedy tokens [bs] of a decode batch (views of the graph's static
        outputs: consume them before the next run)."""
        self.load(batch)
        return self.replay(batch.size)

    def load(self, batch: Batch) -> None:
        """Copy `batch` into the static buffers (padding the rest)."""
        bs = batch.size
        host = self._pad_template.clone()
        host[:, :bs] = torch.stack([batch.input_ids, batch.positions, batch.out_slots]).cpu()
        self.inputs.copy_(host.pin_memory(), non_blocking=True)
        bucket = self._bucket(bs)
        self.attn_backend.prepare_graph_replay(batch, bucket)  # the graph of `bucket` will replay

    def replay(self, bs: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Run the graph of `bs`'s bucket on the loaded inputs; (logits [bs, vocab], greedy [bs])."""
        bucket = self._bucket(bs)
        self.graphs[bucket].replay()
        logits, greedy = self.outputs[bucket]
        return logits[:bs], greedy[:bs]

    def _bucket(self, bs: int) -> int:
        return next(size for size in self.batch_sizes if size >= bs)

    def destroy(self) -> None:
        torch.cuda.synchronize()
        self.graphs.clear()
        self.outputs.clear()
