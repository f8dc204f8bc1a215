"""Attention through FlashInfer's kernels (chapter 10): an optional backend, picked with
`--attention-backend flashinfer` (alias `--attn`) when the `flashinfer-python` package is installed.

It reads the paged pool in place, like the Triton backend, and shares that backend's device page
table (`page_table.py`). FlashInfer takes a batch's KV pages in CSR form:
- `kv_indptr` [reqs + 1]: where request i's pages start in `kv_indices`;
- `kv_indices` [total pages]: every request's page ids, one request after another;
- `kv_last_page_len` [reqs]: how many tokens the last page of request i holds.
`plan()` turns that into a work schedule on the host (how each request's KV is cut into chunks
for the thread blocks) and copies it to the GPU. `run()` then launches the kernel on that schedule.
So `prepare` plans once per batch and `forward` runs once per layer.

Prefill (a cached prefix plus causal new tokens) and decode both use FlashInfer's FA2 prefill
kernel. A decode wrapper with `use_tensor_cores=True` is that same kernel with one query row per
request. So one compiled module per (dtype, head_dim) serves both phases, and any GQA group size
works. FlashInfer compiles that module with nvcc the first time it plans a shape. This takes tens of
seconds and is cached on disk (`$FLASHINFER_WORKSPACE_BASE/.cache/flashinfer`, default: home).

CUDA graphs: a captured kernel keeps its schedule's shape and the addresses of its index buffers.
So each batch-size bucket gets its own decode wrapper, made with `use_cuda_graph=True` over static
indptr/indices/last_page_len buffers. Before each replay, `plan()` rewrites those buffers and the
schedule in place.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

import torch

from minisgl.core import Batch, Req
from minisgl.kernel.triton import store_kv
from minisgl.kvcache import KVCachePool

from .base import AttentionBackend
from .page_table import DevicePageTable

logger = logging.getLogger(__name__)

# Scratch for split-KV partial results, shared by every wrapper (they run one at a time on one
# stream). It needs about q_heads * 2 * num_SMs / kv_heads * tile rows * head_dim * 4 bytes:
# 35 MB for Qwen3-0.6B prefill (16 q / 8 kv heads, 128-row tiles, d 128) on an H200.
WORKSPACE_BYTES = 128 << 20
# Holds the schedule `plan()` writes. Each wrapper allocates 8 MiB by default; we share one.
INT_WORKSPACE_BYTES = 8 << 20
SUPPORTED_HEAD_DIMS = (64, 128, 256)  # head sizes FlashInfer's FA2 kernels are built for


@dataclass
class FlashInferMetadata:
    wrapper: Any  # the planned flashinfer wrapper that runs this batch: prefill, decode or a graph's


def paged_kv_csr(
    page_table: torch.Tensor, rows: list[int], kv_lens: list[int], page_size: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """FlashInfer's description of the KV of requests with page-table `rows` and `kv_lens` tokens:
    indptr [n + 1] and last_page_len [n] on the host (plan() reads them there), and indices
    [total pages] gathered on the device from `page_table` [rows, max_pages]. This avoids a
    Python loop over every page id at every step."""
    counts = torch.tensor([-(-n // page_size) for n in kv_lens], dtype=torch.int32)  # [n] pages per request
    indptr = torch.zeros(len(rows) + 1, dtype=torch.int32)
    torch.cumsum(counts, 0, out=indptr[1:])
    last_page_len = torch.tensor(kv_lens, dtype=torch.int32) - (counts - 1) * page_size
    total = int(indptr[-1])
    host = torch.stack([torch.tensor(rows, dtype=torch.int32), counts, indptr[:-1]])  # [3, n]
    if page_table.is_cuda:
        meta = host.pin_memory().to(page_table.device, non_blocking=True)
    else:
        meta = host.to(page_table.device)
    row, count, start = meta[0], meta[1], meta[2]
    # request of each output entry; output_size avoids a device->host sync for the length
    owner = torch.repeat_interleave(torch.arange(len(rows), device=page_table.device), count, output_size=total)
    page_in_req = torch.arange(total, dtype=torch.int32, device=page_table.device) - start[owner]  # [total]
    return indptr, page_table[row[owner], page_in_req], last_page_len


class FlashInferAttentionBackend(AttentionBackend):
    supports_cuda_graph = True

    def __init__(
        self, pool: KVCachePool, device: torch.device, max_seq_len: int, max_requests: int, local_q_heads: int
    ) -> None:
        _, _, self.local_kv_heads, self.head_dim = pool.k_buffer.shape
        self.dtype = pool.k_buffer.dtype
        if self.dtype not in (torch.bfloat16, torch.float16):
            raise ValueError(
                f"attention backend 'flashinfer' supports bfloat16 and float16, not {self.dtype}; "
                "use --dtype bfloat16 or another --attention-backend (triton, torch)"
            )
        if self.head_dim not in SUPPORTED_HEAD_DIMS:
            raise ValueError(
                f"attention backend 'flashinfer' supports head_dim {', '.join(map(str, SUPPORTED_HEAD_DIMS))}, "
                f"this model has {self.head_dim}; use --attention-backend triton"
            )
        import flashinfer  # optional dependency: imported only when this backend is picked

        self._flashinfer = flashinfer
        self.pool = pool
        self.device = device
        self.page_size = pool.page_size
        self.local_q_heads = local_q_heads
        self.page_rows = DevicePageTable(pool, device, max_seq_len, max_requests)
        self.workspace = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=device)
        self.int_workspace = torch.empty(INT_WORKSPACE_BYTES, dtype=torch.uint8, device=device)
        # backend="fa2" for both: decode and prefill then share one compiled module. (On Hopper,
        # "auto" would pick FA3 for prefill, a second module to compile.)
        self.decode_wrapper = self._shared(flashinfer.BatchDecodeWithPagedKVCacheWrapper(
            self.workspace, "NHD", use_tensor_cores=True, backend="fa2"))
        self.prefill_wrapper = self._shared(flashinfer.BatchPrefillWithPagedKVCacheWrapper(
            self.workspace, "NHD", backend="fa2"))
        # plan() stages its schedule in a pinned host buffer and copies it to the GPU
        # asynchronously. The next plan() rewrites that buffer, so it first waits until the last
        # copy has read it. Under overlap scheduling that copy is normally long done.
        self._plan_copied = torch.cuda.Event()
        self._graph_buffers: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
        self._graph_wrappers: dict[int, Any] = {}  # bucket -> its CUDA-graph decode wrapper
        logger.info("flashinfer %s: kernels compile with nvcc on first use (tens of seconds, then cached)",
                    flashinfer.__version__)

    def _shared(self, wrapper: Any) -> Any:
        wrapper.reset_workspace_buffer(self.workspace, self.int_workspace)  # one int workspace for all
        return wrapper

    def release(self, req: Req) -> None:
        """`req` finished: its page-table row goes back to the free list."""
        self.page_rows.release(req)

    # ---- the AttentionBackend interface ---------------------------------------------------------
    def prepare(self, batch: Batch) -> None:
        kv_lens = [p + e for p, e in zip(batch.prefix_lens, batch.extend_lens)]
        if all(extend == 1 for extend in batch.extend_lens):
            self._plan_decode(self.decode_wrapper, batch.reqs, kv_lens, num_padding=0)
            batch.attn_metadata = FlashInferMetadata(self.decode_wrapper)
            return
        indptr, indices, last_page_len = paged_kv_csr(
            self.page_rows.table, self.page_rows.upload(batch.reqs), kv_lens, self.page_size
        )
        qo_indptr = torch.tensor([0, *accumulate(batch.extend_lens)], dtype=torch.int32)  # [reqs + 1]
        self._plan(
            self.prefill_wrapper, qo_indptr.pin_memory(), indptr.pin_memory(), indices, last_page_len.pin_memory(),
            self.local_q_heads, self.local_kv_heads, self.head_dim, self.page_size,
            causal=True,  # new token j of a request sees its prefix and new tokens 0..j
            q_data_type=self.dtype, kv_data_type=self.dtype,
        )
        batch.attn_metadata = FlashInferMetadata(self.prefill_wrapper)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer_id: int, batch: Batch) -> torch.Tensor:
        k_cache, v_cache = self.pool.k_buffer[layer_id], self.pool.v_buffer[layer_id]
        store_kv(k_cache, v_cache, batch.out_slots, k, v)  # slot -1 (graph padding) writes nothing
        # [slots, kv_heads, d] -> [pages, page_size, kv_heads, d]: FlashInfer's "NHD" paged layout
        paged = (k_cache.view(-1, self.page_size, self.local_kv_heads, self.head_dim),
                 v_cache.view(-1, self.page_size, self.local_kv_heads, self.head_dim))
        return batch.attn_metadata.wrapper.run(q, paged)  # [tokens, q_heads, d]

    # ---- planning ---------------------------------------------------------------------------------
    def _plan(self, wrapper: Any, *args: Any, **kwargs: Any) -> None:
        self._plan_copied.synchronize()
        wrapper.plan(*args, **kwargs)
        self._plan_copied.record()

    def _plan_decode(self, wrapper: Any, reqs: list[Req], kv_lens: list[int], num_padding: int) -> None:
        """Plan one query per request; `num_padding` extra rows (a graph bucket's padding) see one
        token of page 0, through the page table's row 0."""
        rows = self.page_rows.upload(reqs) + [0] * num_padding
        indptr, indices, last_page_len = paged_kv_csr(
            self.page_rows.table, rows, kv_lens + [1] * num_padding, self.page_size
        )
        self._plan(
            wrapper, indptr.pin_memory(), indices, last_page_len.pin_memory(),
            self.local_q_heads, self.local_kv_heads, self.head_dim, self.page_size,
            q_data_type=self.dtype, kv_data_type=self.dtype,
        )

    # ---- CUDA graphs (engine/cuda_graph.py) -------------------------------------------------------
    def init_graph_buffers(self, max_bs: int) -> None:
        """Static index buffers every graph reads: indptr [max_bs + 1], indices [max_bs * max pages
        per request], last_page_len [max_bs]. Each bucket's wrapper uses a prefix of them."""
        max_indices = max_bs * self.page_rows.max_pages_per_req
        self._graph_buffers = (
            torch.zeros(max_bs + 1, dtype=torch.int32, device=self.device),
            torch.zeros(max_indices, dtype=torch.int32, device=self.device),
            torch.ones(max_bs, dtype=torch.int32, device=self.device),
        )

    def graph_metadata(self, bs: int) -> FlashInferMetadata:
        """A decode wrapper for the graph of `bs` rows, planned with padding rows only (capture
        records the kernels; replays plan real batches into the same buffers)."""
        assert self._graph_buffers is not None
        indptr, indices, last_page_len = self._graph_buffers
        wrapper = self._shared(self._flashinfer.BatchDecodeWithPagedKVCacheWrapper(
            self.workspace, "NHD", use_cuda_graph=True, use_tensor_cores=True,
            paged_kv_indptr_buffer=indptr[: bs + 1], paged_kv_indices_buffer=indices,
            paged_kv_last_page_len_buffer=last_page_len[:bs], backend="fa2",
        ))
        self._plan_decode(wrapper, [], [], num_padding=bs)
        self._graph_wrappers[bs] = wrapper
        return FlashInferMetadata(wrapper)

    def prepare_graph_replay(self, batch: Batch, bucket: int) -> None:
        """Plan `batch` into the static buffers of the graph of `bucket`, padding the rest."""
        kv_lens = [p + 1 for p in batch.prefix_lens]
        self._plan_decode(self._graph_wrappers[bucket], batch.reqs, kv_lens, num_padding=bucket - batch.size)
