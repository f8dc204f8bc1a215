"""Attention with our Triton kernels (chapter 10): the default backend on CUDA.

Per layer: `decode_attention` (one new token per request; it stores the new K/V into the pool
itself, and with `forward_rope` applies the q/k norms and RoPE too), or `store_kv` and then
`extend_attention` (prefill, chunked prefill), reads each request's K/V straight from the pool
through a page table. Nothing is gathered into a padded copy, as the torch backend does.

The page table (`page_table.py`) lives on the device and is written once per request, when the
request first shows up. A step then only uploads each request's row index and length: a few hundred
bytes, whatever the context length. Row 0 is the padding row: it points at page 0, which the
allocator never hands out, so CUDA-graph padding rows read harmless data.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from minisgl.core import Batch, Req
from minisgl.kvcache import KVCachePool
from minisgl.kernel.triton import decode_attention, extend_attention, store_kv
from minisgl.kernel.triton.decode_attention import DecodeRope

from .base import AttentionBackend
from .page_table import DevicePageTable


@dataclass
class TritonDecodeMetadata:
    req_rows: torch.Tensor  # [reqs] int32, page-table row of each request
    seq_lens: torch.Tensor  # [reqs] int32, KV length including the new token


@dataclass
class TritonExtendMetadata:
    req_rows: torch.Tensor  # [reqs] int32
    prefix_lens: torch.Tensor  # [reqs] int32, tokens already cached
    extend_lens: torch.Tensor  # [reqs] int32, new tokens
    q_starts: torch.Tensor  # [reqs] int32, first new token's row in the flat token array
    max_extend_len: int


def decode_num_splits(batch_size: int, local_kv_heads: int, num_sms: int) -> int:
    """KV splits of the decode kernel: about two (request, KV head, split) programs per SM, 1 to 16.
    Small batches split long contexts to fill the GPU; large ones need no split (and skip the merge
    pass). It depends on the batch size rounded up to a power of two, which a CUDA-graph bucket
    never changes (buckets are powers of two up to 8, then multiples of 8), so a batch computes the
    same numbers with or without graphs."""
    rounded = 1 << (batch_size - 1).bit_length()
    wanted = -(-2 * num_sms // (rounded * local_kv_heads))
    return min(16, 1 << (wanted - 1).bit_length())


class TritonAttentionBackend(AttentionBackend):
    supports_cuda_graph = True

    def __init__(self, pool: KVCachePool, device: torch.device, max_seq_len: int, max_requests: int) -> None:
        self.pool = pool
        self.device = device
        self.page_size = pool.page_size
        self.local_kv_heads = pool.k_buffer.shape[2]
        # the CPU interpreter pretends to have 16 SMs: small test batches still split and merge
        self.num_sms = torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 16
        self.page_rows = DevicePageTable(pool, device, max_seq_len, max_requests)
        self.page_table = self.page_rows.table  # [rows, max_pages] int32, what the kernels read
        # slices finished per (request, KV head): the decode kernel's merge count, zero between launches
        self._split_counters = torch.zeros(max_requests * self.local_kv_heads, dtype=torch.int32, device=device)
        self._graph_meta: torch.Tensor | None = None  # [2, max_bs] int32 rows, seq_lens (CUDA graphs)

    def release(self, req: Req) -> None:
        """`req` finished: its page-table row goes back to the free list."""
        self.page_rows.release(req)

    # ---- the AttentionBackend interface ---------------------------------------------------------
    def prepare(self, batch: Batch) -> None:
        rows = self.page_rows.upload(batch.reqs)
        if all(extend == 1 for extend in batch.extend_lens):
            seq_lens = [p + 1 for p in batch.prefix_lens]
            meta = self.page_rows.to_device(torch.tensor([rows, seq_lens], dtype=torch.int32))  # [2, reqs]
            batch.attn_metadata = TritonDecodeMetadata(meta[0], meta[1])
            return
        q_starts, start = [], 0
        for extend in batch.extend_lens:
            q_starts.append(start)
            start += extend
        host = torch.tensor([rows, batch.prefix_lens, batch.extend_lens, q_starts], dtype=torch.int32)  # [4, reqs]
        meta = self.page_rows.to_device(host)
        batch.attn_metadata = TritonExtendMetadata(meta[0], meta[1], meta[2], meta[3], max(batch.extend_lens))

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer_id: int, batch: Batch) -> torch.Tensor:
        if isinstance(batch.attn_metadata, TritonDecodeMetadata):  # the kernel stores the new K/V itself
            return self._decode(q, k, v, layer_id, batch)
        k_cache, v_cache = self.pool.k_buffer[layer_id], self.pool.v_buffer[layer_id]
        meta = batch.attn_metadata
        store_kv(k_cache, v_cache, batch.out_slots, k, v)
        return extend_attention(
            q, k_cache, v_cache, self.page_table, meta.req_rows, meta.prefix_lens, meta.extend_lens, meta.q_starts,
            meta.max_extend_len, self.page_size, q.shape[-1] ** -0.5,
        )

    def forward_rope(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer_id: int, batch: Batch,
                     positions: torch.Tensor, cos_sin: torch.Tensor,
                     qk_norm: tuple[torch.Tensor, torch.Tensor, float] | None = None) -> torch.Tensor | None:
        """Decode batches: the decode kernel norms and rotates q and the new k itself (no launch of
        their own). Prefill: None."""
        if not isinstance(batch.attn_metadata, TritonDecodeMetadata):
            return None
        q_norm, k_norm, eps = qk_norm if qk_norm is not None else (None, None, 0.0)
        return self._decode(q, k, v, layer_id, batch, DecodeRope(positions, cos_sin, q_norm, k_norm, eps))

    def _decode(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer_id: int, batch: Batch,
                rope: DecodeRope | None = None) -> torch.Tensor:
        meta = batch.attn_metadata
        return decode_attention(
            q, self.pool.k_buffer[layer_id], self.pool.v_buffer[layer_id], self.page_table, meta.req_rows,
            meta.seq_lens, self.page_size, q.shape[-1] ** -0.5,
            decode_num_splits(q.shape[0], self.local_kv_heads, self.num_sms), new_kv=(k, v, batch.out_slots),
            rope=rope, split_counters=self._split_counters,
        )

    # ---- CUDA graphs (engine/cuda_graph.py) -------------------------------------------------------
    def init_graph_buffers(self, max_bs: int) -> None:
        if self._split_counters.numel() < max_bs * self.local_kv_heads:  # graphs may pad past max_requests
            self._split_counters = torch.zeros(max_bs * self.local_kv_heads, dtype=torch.int32, device=self.device)
        self._graph_meta = torch.zeros(2, max_bs, dtype=torch.int32, device=self.device)
        self._graph_meta[1].fill_(1)  # padding rows: row 0, one key (slot 0)

    def graph_metadata(self, bs: int) -> TritonDecodeMetadata:
        """Views of the static buffers a graph of batch size `bs` is captured with."""
        assert self._graph_meta is not None
        return TritonDecodeMetadata(self._graph_meta[0, :bs], self._graph_meta[1, :bs])

    def prepare_graph_replay(self, batch: Batch, bucket: int) -> None:
        """Write `batch`'s rows and lengths into the static buffers; the rest stays padding (so
        every bucket's graph, `bucket` included, reads valid rows)."""
        assert self._graph_meta is not None
        rows = self.page_rows.upload(batch.reqs)
        host = torch.zeros(2, self._graph_meta.shape[1], dtype=torch.int32)
        host[1].fill_(1)
        host[0, : batch.size] = torch.tensor(rows, dtype=torch.int32)
        host[1, : batch.size] = torch.tensor(batch.prefix_lens, dtype=torch.int32) + 1
        self._graph_meta.copy_(host.pin_memory(), non_blocking=True)
