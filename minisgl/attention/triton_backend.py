"""Attention with our Triton kernels (chapter 10): the default backend on CUDA.

Per layer: `store_kv` scatters the new K/V into the pool, then `decode_attention` (one new token per
request) or `extend_attention` (prefill, chunked prefill) reads each request's K/V straight from
the pool through a page table. Nothing is gathered into a padded copy, as the torch backend does.

The page table lives on the device and is written once per request, when the request first shows
up (the scheduler reserves all of a request's pages at admission, so its row never changes; pages
appended later are uploaded as they appear). A step then only uploads each request's row index and
length: a few hundred bytes, whatever the context length. Row 0 is never handed out: it points at
page 0, which the allocator never hands out either, so CUDA-graph padding rows read harmless data.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import torch

from minisgl.core import Batch, Req
from minisgl.kvcache import KVCachePool
from minisgl.kernel.triton import decode_attention, extend_attention, store_kv


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


class TritonAttentionBackend:
    def __init__(self, pool: KVCachePool, device: torch.device, max_seq_len: int, max_requests: int) -> None:
        self.pool = pool
        self.device = device
        self.page_size = pool.page_size
        self.local_kv_heads = pool.k_buffer.shape[2]
        # the CPU interpreter pretends to have 16 SMs: small test batches still split and merge
        self.num_sms = torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 16
        self.max_pages_per_req = pool.pages_for(max_seq_len)
        # [rows, max_pages] int32; row 0 (all page 0) is the padding row
        self.page_table = torch.zeros(max_requests + 1, self.max_pages_per_req, dtype=torch.int32, device=device)
        self._free_rows = list(range(max_requests, 0, -1))
        # req -> [row, pages uploaded, finalizer]; the finalizer frees the row if a caller drops a
        # request without release() (tests driving the engine by hand)
        self._rows: weakref.WeakKeyDictionary[Req, list] = weakref.WeakKeyDictionary()
        self._graph_meta: torch.Tensor | None = None  # [2, max_bs] int32 rows, seq_lens (CUDA graphs)

    # ---- per-request page-table rows ----------------------------------------------------------
    def release(self, req: Req) -> None:
        """`req` finished: its row goes back to the free list (work already queued keeps reading
        the old contents; later uploads are ordered after it on the same stream)."""
        entry = self._rows.pop(req, None)
        if entry is not None:
            entry[2]()  # runs the finalizer now, once: the row is freed

    def _upload_rows(self, reqs: list[Req]) -> list[int]:
        """Row of each request, uploading page ids the device has not seen yet (one H2D copy)."""
        rows: list[int] = []
        index_parts: list[torch.Tensor] = []
        value_parts: list[torch.Tensor] = []
        width = self.max_pages_per_req
        for req in reqs:
            entry = self._rows.get(req)
            if entry is None:
                if not self._free_rows:
                    raise RuntimeError(
                        f"more than {self.page_table.shape[0] - 1} live requests in the attention backend; "
                        "raise max_running_requests or release finished requests (Engine.release)"
                    )
                row = self._free_rows.pop()
                entry = [row, 0, weakref.finalize(req, self._free_rows.append, row)]
                self._rows[req] = entry
            row, uploaded = entry[0], entry[1]
            num_pages = len(req.pages)
            if num_pages > width:
                raise ValueError(f"request {req.uid} holds {num_pages} pages; the page table fits {width}")
            if num_pages < uploaded:
                uploaded = 0  # the page list was replaced: upload it again
            if num_pages > uploaded:
                index_parts.append(torch.arange(uploaded, num_pages, dtype=torch.int64) + row * width)
                value_parts.append(torch.tensor(req.pages[uploaded:], dtype=torch.int32))
                entry[1] = num_pages
            rows.append(row)
        if index_parts:
            index = self._to_device(torch.cat(index_parts))
            values = self._to_device(torch.cat(value_parts))
            self.page_table.view(-1).index_copy_(0, index, values)
        return rows

    def _to_device(self, host: torch.Tensor) -> torch.Tensor:
        if self.device.type == "cuda":
            return host.pin_memory().to(self.device, non_blocking=True)  # no host-device sync
        return host.to(self.device)

    # ---- the AttentionBackend interface ---------------------------------------------------------
    def prepare(self, batch: Batch) -> None:
        rows = self._upload_rows(batch.reqs)
        if all(extend == 1 for extend in batch.extend_lens):
            seq_lens = [p + 1 for p in batch.prefix_lens]
            meta = self._to_device(torch.tensor([rows, seq_lens], dtype=torch.int32))  # [2, reqs]
            batch.attn_metadata = TritonDecodeMetadata(meta[0], meta[1])
            return
        q_starts, start = [], 0
        for extend in batch.extend_lens:
            q_starts.append(start)
            start += extend
        meta = self._to_device(torch.tensor([rows, batch.prefix_lens, batch.extend_lens, q_starts], dtype=torch.int32))
        batch.attn_metadata = TritonExtendMetadata(meta[0], meta[1], meta[2], meta[3], max(batch.extend_lens))

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer_id: int, batch: Batch) -> torch.Tensor:
        k_cache, v_cache = self.pool.k_buffer[layer_id], self.pool.v_buffer[layer_id]
        store_kv(k_cache, v_cache, batch.out_slots, k, v)
        meta = batch.attn_metadata
        scale = q.shape[-1] ** -0.5
        if isinstance(meta, TritonDecodeMetadata):
            return decode_attention(
                q, k_cache, v_cache, self.page_table, meta.req_rows, meta.seq_lens, self.page_size, scale,
                decode_num_splits(q.shape[0], self.local_kv_heads, self.num_sms),
            )
        return extend_attention(
            q, k_cache, v_cache, self.page_table, meta.req_rows, meta.prefix_lens, meta.extend_lens, meta.q_starts,
            meta.max_extend_len, self.page_size, scale,
        )

    # ---- CUDA graphs (engine/cuda_graph.py) -------------------------------------------------------
    def init_graph_buffers(self, max_bs: int) -> None:
        self._graph_meta = torch.zeros(2, max_bs, dtype=torch.int32, device=self.device)
        self._graph_meta[1].fill_(1)  # padding rows: row 0, one key (slot 0)

    def graph_metadata(self, bs: int) -> TritonDecodeMetadata:
        """Views of the static buffers a graph of batch size `bs` is captured with."""
        assert self._graph_meta is not None
        return TritonDecodeMetadata(self._graph_meta[0, :bs], self._graph_meta[1, :bs])

    def prepare_graph_replay(self, batch: Batch) -> None:
        """Write `batch`'s rows and lengths into the static buffers; the rest stays padding."""
        assert self._graph_meta is not None
        rows = self._upload_rows(batch.reqs)
        host = torch.zeros(2, self._graph_meta.shape[1], dtype=torch.int32)
        host[1].fill_(1)
        host[0, : batch.size] = torch.tensor(rows, dtype=torch.int32)
        host[1, : batch.size] = torch.tensor(batch.prefix_lens, dtype=torch.int32) + 1
        self._graph_meta.copy_(host.pin_memory(), non_blocking=True)
