"""Paged decode attention: one new query token per request against its whole cached K/V (chapter 10).

Two passes (split-K, "flash-decoding"):
1. grid (requests, kv_heads, splits): each program takes one request, one KV head and one of
   `num_splits` equal slices of that request's KV positions, and attends with all the query heads
   that share the KV head (GQA: the group's queries form the rows of one small matrix product, so
   each K/V tile is read once per group, not once per query head). It writes the slice's softmax-
   normalised output and its log-sum-exp.
2. grid (requests, q_heads): merge the slices, weighting slice s by exp(lse_s - logsumexp(lse)).

The new token's K/V can be handed to the kernel (`new_kv`): the program whose slice holds the new
position writes them into the pool before reading it, which saves the separate `store_kv` launch
of every layer (the backend does this; the notebook passes a cache that already holds them).

Splitting keeps the GPU busy when requests x KV heads is small (batch 1 has 3-8 programs without
it). The caller picks the number of splits (`decode_num_splits` in minisgl/attention/
triton_backend.py: from the batch size rounded up to a power of two, so CUDA-graph padding never
changes it); a request decoded in a batch of another size may round slightly differently.

KV position p of a request with page-table row r lives in slot
`page_table[r, p // page_size] * page_size + p % page_size`.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .pdl import let_next_kernel_launch, pdl_launch_options, wait_previous_kernel
from .store_kv import token_rows

LOG2E = 1.4426950408889634


def dot_precision(dtype: torch.dtype) -> str | None:
    """fp32 inputs multiply in true fp32 ("ieee"), not tf32: fp32 runs are the exact reference
    runs (same tokens at any TP size), and attention is memory-bound anyway. None: the default."""
    return "ieee" if dtype == torch.float32 else None


@triton.jit
def attend_kv_tile(q, k_cache_ptr, v_cache_ptr, kv_offs, kv_mask, visible, m_i, l_i, acc, scale_log2,
                   PRECISION: tl.constexpr):
    """One step of the online softmax (FlashAttention) over one tile of cached keys and values.

    q [rows, D] attends to the K/V rows at `kv_offs` [BLOCK_N, D]; `visible` [rows, BLOCK_N] masks
    keys out. Carries the running max m_i and sum l_i of exp2(scores - m_i) [rows] and the unscaled
    output acc [rows, D]; the caller divides acc by l_i at the end. Shared by decode and extend.
    """
    k = tl.load(k_cache_ptr + kv_offs, mask=kv_mask, other=0.0)  # [BLOCK_N, D]
    scores = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale_log2  # [rows, BLOCK_N], log2 units
    scores = tl.where(visible, scores, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(scores, 1))
    p = tl.exp2(scores - m_new[:, None])
    alpha = tl.exp2(m_i - m_new)  # rescales what was accumulated under the old max
    l_i = l_i * alpha + tl.sum(p, 1)
    v = tl.load(v_cache_ptr + kv_offs, mask=kv_mask, other=0.0)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
    return m_new, l_i, acc


@triton.jit
def _decode_split_kernel(
    q_ptr,  # [reqs, q_heads, head_dim]
    k_cache_ptr,  # [slots, kv_heads, head_dim]
    v_cache_ptr,
    page_table_ptr,  # [rows, max_pages] int32
    req_rows_ptr,  # [reqs] int32
    seq_lens_ptr,  # [reqs] int32
    new_k_ptr,  # [reqs, kv_heads, head_dim]: the new token's K (STORE_NEW_KV)
    new_v_ptr,
    new_slots_ptr,  # [reqs]: its slot in the pool, -1 for CUDA-graph padding rows
    out_ptr,  # [reqs, q_heads, splits, head_dim] fp32, or [reqs, q_heads, head_dim] when DIRECT
    lse_ptr,  # [reqs, q_heads, splits] fp32
    scale_log2,  # softmax scale * log2(e): exp2 instead of exp
    q_req_stride,
    q_head_stride,
    new_k_req_stride,
    new_v_req_stride,
    cache_slot_stride,
    cache_head_stride,
    page_table_stride,
    out_req_stride,
    out_head_stride,
    out_split_stride,
    NUM_HEADS: tl.constexpr,
    GROUP: tl.constexpr,  # query heads per KV head
    HEAD_DIM: tl.constexpr,
    PAGE_SIZE: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
    DIRECT: tl.constexpr,  # one split: write the final output, no lse, no merge pass
    BLOCK_H: tl.constexpr,  # GROUP padded to >= 16 (the smallest tl.dot)
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    PRECISION: tl.constexpr,  # see dot_precision
    STORE_NEW_KV: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    req = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    let_next_kernel_launch(USE_PDL)
    wait_previous_kernel(USE_PDL)
    seq_len = tl.load(seq_lens_ptr + req)
    row = tl.load(req_rows_ptr + req).to(tl.int64)
    split_len = tl.cdiv(tl.cdiv(seq_len, NUM_SPLITS), BLOCK_N) * BLOCK_N
    start = split * split_len
    end = tl.minimum(start + split_len, seq_len)
    dims = tl.arange(0, BLOCK_D)
    dim_mask = dims < HEAD_DIM

    if STORE_NEW_KV:  # the slice holding position seq_len - 1 writes this KV head's new K/V first
        new_slot = tl.load(new_slots_ptr + req).to(tl.int64)
        owns_new = (seq_len - 1 >= start) & (seq_len - 1 < end) & (new_slot >= 0)
        new_mask = dim_mask & owns_new
        new_k = tl.load(new_k_ptr + req.to(tl.int64) * new_k_req_stride + kv_head * HEAD_DIM + dims, mask=new_mask)
        new_v = tl.load(new_v_ptr + req.to(tl.int64) * new_v_req_stride + kv_head * HEAD_DIM + dims, mask=new_mask)
        new_offs = new_slot * cache_slot_stride + kv_head * cache_head_stride + dims
        tl.store(k_cache_ptr + new_offs, new_k, mask=new_mask)
        tl.store(v_cache_ptr + new_offs, new_v, mask=new_mask)
        tl.debug_barrier()  # the loop below reads that slot back: every thread must see the store

    heads = kv_head * GROUP + tl.arange(0, BLOCK_H)  # [BLOCK_H]
    head_mask = tl.arange(0, BLOCK_H) < GROUP
    q = tl.load(
        q_ptr + req.to(tl.int64) * q_req_stride + heads[:, None] * q_head_stride + dims[None, :],
        mask=head_mask[:, None] & dim_mask[None, :],
        other=0.0,
    )  # [BLOCK_H, BLOCK_D]

    m_i = tl.full([BLOCK_H], float("-inf"), tl.float32)  # running max of the scores (log2 units)
    l_i = tl.zeros([BLOCK_H], tl.float32)  # running sum of exp2(score - m_i)
    acc = tl.zeros([BLOCK_H, BLOCK_D], tl.float32)
    for block_start in range(start, end, BLOCK_N):
        pos = block_start + tl.arange(0, BLOCK_N)
        pos_mask = pos < end
        page = tl.load(page_table_ptr + row * page_table_stride + pos // PAGE_SIZE, mask=pos_mask, other=0)
        slot = page.to(tl.int64) * PAGE_SIZE + pos % PAGE_SIZE  # [BLOCK_N]
        kv_offs = slot[:, None] * cache_slot_stride + kv_head * cache_head_stride + dims[None, :]
        kv_mask = pos_mask[:, None] & dim_mask[None, :]
        m_i, l_i, acc = attend_kv_tile(q, k_cache_ptr, v_cache_ptr, kv_offs, kv_mask, pos_mask[None, :],
                                       m_i, l_i, acc, scale_log2, PRECISION)

    has_keys = l_i > 0  # an empty slice (short request, many splits) contributes nothing
    out = acc / tl.where(has_keys, l_i, 1.0)[:, None]
    base = out_ptr + req.to(tl.int64) * out_req_stride + heads[:, None] * out_head_stride + dims[None, :]
    store_mask = head_mask[:, None] & dim_mask[None, :]
    if DIRECT:
        tl.store(base, out.to(out_ptr.dtype.element_ty), mask=store_mask)
    else:
        tl.store(base + split * out_split_stride, out, mask=store_mask)
        lse = tl.where(has_keys, m_i + tl.log2(tl.where(has_keys, l_i, 1.0)), float("-inf"))  # log2 units
        tl.store(lse_ptr + (req * NUM_HEADS + heads) * NUM_SPLITS + split, lse, mask=head_mask)


@triton.jit
def _merge_splits_kernel(
    partial_ptr,  # [reqs, q_heads, splits, head_dim] fp32
    lse_ptr,  # [reqs, q_heads, splits] fp32 (log2 units)
    out_ptr,  # [reqs, q_heads, head_dim]
    out_req_stride,
    out_head_stride,
    NUM_HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
    BLOCK_S: tl.constexpr,
    BLOCK_D: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    req = tl.program_id(0)
    head = tl.program_id(1)
    let_next_kernel_launch(USE_PDL)
    wait_previous_kernel(USE_PDL)
    splits = tl.arange(0, BLOCK_S)
    split_mask = splits < NUM_SPLITS
    dims = tl.arange(0, BLOCK_D)
    dim_mask = dims < HEAD_DIM
    row = req.to(tl.int64) * NUM_HEADS + head
    lse = tl.load(lse_ptr + row * NUM_SPLITS + splits, mask=split_mask, other=float("-inf"))
    weights = tl.exp2(lse - tl.max(lse, 0))  # slice 0 always holds keys, so the max is finite
    weights = weights / tl.sum(weights, 0)
    partial = tl.load(
        partial_ptr + (row * NUM_SPLITS + splits[:, None]) * HEAD_DIM + dims[None, :],
        mask=split_mask[:, None] & dim_mask[None, :],
        other=0.0,
    )  # [BLOCK_S, BLOCK_D]
    out = tl.sum(weights[:, None] * partial, 0)
    tl.store(
        out_ptr + req.to(tl.int64) * out_req_stride + head * out_head_stride + dims,
        out.to(out_ptr.dtype.element_ty),
        mask=dim_mask,
    )


def decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    page_table: torch.Tensor,
    req_rows: torch.Tensor,
    seq_lens: torch.Tensor,
    page_size: int,
    scale: float,
    num_splits: int,
    out: torch.Tensor | None = None,
    new_kv: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """q [reqs, q_heads, d]; caches [slots, kv_heads, d] (one layer); page_table [rows, max_pages];
    req_rows, seq_lens [reqs] int32 (seq_len >= 1 counts the new token). The new token's K/V is
    already in the cache, or comes as new_kv = (k, v [reqs, kv_heads, d], slots [reqs]) and is
    stored by the kernel. Returns [reqs, q_heads, d]."""
    num_reqs, num_heads, head_dim = q.shape
    num_kv_heads = k_cache.shape[1]
    group = num_heads // num_kv_heads
    if out is None:
        out = torch.empty_like(q)
    if num_reqs == 0:
        return out
    if q.stride(-1) != 1:
        q = q.contiguous()
    block_d = max(16, triton.next_power_of_2(head_dim))
    pdl = pdl_launch_options(q)
    direct = num_splits == 1
    if direct:
        partial, lse = out, out  # lse unused
        partial_strides = (out.stride(0), out.stride(1), 0)
    else:
        partial = torch.empty(num_reqs, num_heads, num_splits, head_dim, dtype=torch.float32, device=q.device)
        lse = torch.empty(num_reqs, num_heads, num_splits, dtype=torch.float32, device=q.device)
        partial_strides = (partial.stride(0), partial.stride(1), partial.stride(2))
    if new_kv is not None:
        new_k, new_v, new_slots = token_rows(new_kv[0]), token_rows(new_kv[1]), new_kv[2]
    else:
        new_k, new_v, new_slots = q, q, seq_lens  # unused (STORE_NEW_KV=False)
    _decode_split_kernel[(num_reqs, num_kv_heads, num_splits)](
        q, k_cache, v_cache, page_table, req_rows, seq_lens, new_k, new_v, new_slots, partial, lse,
        scale * LOG2E,
        q.stride(0), q.stride(1),
        new_k.stride(0), new_v.stride(0),
        k_cache.stride(0), k_cache.stride(1),
        page_table.stride(0),
        *partial_strides,
        NUM_HEADS=num_heads,
        GROUP=group,
        HEAD_DIM=head_dim,
        PAGE_SIZE=page_size,
        NUM_SPLITS=num_splits,
        DIRECT=direct,
        BLOCK_H=max(16, triton.next_power_of_2(group)),
        BLOCK_N=64 if block_d <= 128 else 32,
        BLOCK_D=block_d,
        PRECISION=dot_precision(q.dtype),
        STORE_NEW_KV=new_kv is not None,
        num_warps=4,
        num_stages=2,
        **pdl,
    )
    if not direct:
        _merge_splits_kernel[(num_reqs, num_heads)](
            partial, lse, out, out.stride(0), out.stride(1),
            NUM_HEADS=num_heads,
            HEAD_DIM=head_dim,
            NUM_SPLITS=num_splits,
            BLOCK_S=triton.next_power_of_2(num_splits),
            BLOCK_D=block_d,
            num_warps=1 if block_d <= 64 else 2,
            **pdl,
        )
    return out
