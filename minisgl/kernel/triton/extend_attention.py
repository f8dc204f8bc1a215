"""Prefill / extend attention: each request's new tokens against its cached prefix plus the new
tokens themselves, causally (chapter 10).

Request i has `prefix_len` tokens already cached and `extend_len` new ones, whose K/V the caller
stored into the pool first; new token j sits at position prefix_len + j and sees KV positions
0 .. prefix_len + j. Reading the new tokens' K/V back from the pool (instead of from the fresh k, v
tensors) makes "cached prefix" and "causal new tokens" one loop over one page table.

grid (requests, q_heads, query blocks): a program loads BLOCK_M queries of one head into a tile,
streams K/V tiles of its KV head with an online softmax (FlashAttention), and stops at the last
position its last query may see.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .decode_attention import LOG2E, attend_kv_tile, dot_precision
from .pdl import let_next_kernel_launch, pdl_launch_options, wait_previous_kernel


@triton.jit
def _extend_kernel(
    q_ptr,  # [tokens, q_heads, head_dim]
    k_cache_ptr,  # [slots, kv_heads, head_dim]
    v_cache_ptr,
    out_ptr,  # [tokens, q_heads, head_dim]
    page_table_ptr,  # [rows, max_pages] int32
    req_rows_ptr,  # [reqs] int32
    prefix_lens_ptr,  # [reqs] int32
    extend_lens_ptr,  # [reqs] int32
    q_starts_ptr,  # [reqs] int32: row of the request's first new token in q
    scale_log2,
    q_token_stride,
    q_head_stride,
    out_token_stride,
    out_head_stride,
    cache_slot_stride,
    cache_head_stride,
    page_table_stride,
    GROUP: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    PAGE_SIZE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    PRECISION: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    req = tl.program_id(0)
    head = tl.program_id(1)
    block_m = tl.program_id(2)
    let_next_kernel_launch(USE_PDL)
    wait_previous_kernel(USE_PDL)
    kv_head = head // GROUP
    extend_len = tl.load(extend_lens_ptr + req)
    prefix_len = tl.load(prefix_lens_ptr + req)
    q_start = tl.load(q_starts_ptr + req).to(tl.int64)
    row = tl.load(req_rows_ptr + req).to(tl.int64)

    q_index = block_m * BLOCK_M + tl.arange(0, BLOCK_M)  # [BLOCK_M] index among the new tokens
    q_mask = q_index < extend_len
    dims = tl.arange(0, BLOCK_D)
    dim_mask = dims < HEAD_DIM
    q = tl.load(
        q_ptr + (q_start + q_index)[:, None] * q_token_stride + head * q_head_stride + dims[None, :],
        mask=q_mask[:, None] & dim_mask[None, :],
        other=0.0,
    )  # [BLOCK_M, BLOCK_D]
    q_pos = prefix_len + q_index  # position of each query = last KV position it sees
    # Past the request's last block there is nothing to do: an empty loop, a fully masked store.
    kv_end = tl.minimum(prefix_len + (block_m + 1) * BLOCK_M, prefix_len + extend_len)
    kv_end = kv_end * (block_m * BLOCK_M < extend_len).to(tl.int32)

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    for block_start in range(0, kv_end, BLOCK_N):
        pos = block_start + tl.arange(0, BLOCK_N)
        pos_mask = pos < kv_end
        page = tl.load(page_table_ptr + row * page_table_stride + pos // PAGE_SIZE, mask=pos_mask, other=0)
        slot = page.to(tl.int64) * PAGE_SIZE + pos % PAGE_SIZE
        kv_offs = slot[:, None] * cache_slot_stride + kv_head * cache_head_stride + dims[None, :]
        kv_mask = pos_mask[:, None] & dim_mask[None, :]
        visible = (pos[None, :] <= q_pos[:, None]) & pos_mask[None, :]  # causal, inside the request
        # Every query sees position 0 in the first tile, so the running max is finite from then on.
        m_i, l_i, acc = attend_kv_tile(q, k_cache_ptr, v_cache_ptr, kv_offs, kv_mask, visible,
                                       m_i, l_i, acc, scale_log2, PRECISION)

    out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
    tl.store(
        out_ptr + (q_start + q_index)[:, None] * out_token_stride + head * out_head_stride + dims[None, :],
        out.to(out_ptr.dtype.element_ty),
        mask=q_mask[:, None] & dim_mask[None, :],
    )


def extend_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    page_table: torch.Tensor,
    req_rows: torch.Tensor,
    prefix_lens: torch.Tensor,
    extend_lens: torch.Tensor,
    q_starts: torch.Tensor,
    max_extend_len: int,
    page_size: int,
    scale: float,
) -> torch.Tensor:
    """q [tokens, q_heads, d] (the requests' new tokens, concatenated); caches [slots, kv_heads, d]
    (one layer, new K/V already stored); per-request int32 tensors [reqs]. Returns [tokens, q_heads, d]."""
    num_tokens, num_heads, head_dim = q.shape
    num_reqs = req_rows.shape[0]
    out = torch.empty_like(q)
    if num_tokens == 0:
        return out
    if q.stride(-1) != 1:
        q = q.contiguous()
    block_d = max(16, triton.next_power_of_2(head_dim))
    block_m = 64 if block_d <= 128 else 32
    if max_extend_len <= 16:
        block_m = 16  # short extends (e.g. decode-like steps): do not waste a 64-row tile
    grid = (num_reqs, num_heads, triton.cdiv(max_extend_len, block_m))
    _extend_kernel[grid](
        q, k_cache, v_cache, out, page_table, req_rows, prefix_lens, extend_lens, q_starts,
        scale * LOG2E,
        q.stride(0), q.stride(1),
        out.stride(0), out.stride(1),
        k_cache.stride(0), k_cache.stride(1),
        page_table.stride(0),
        GROUP=num_heads // k_cache.shape[1],
        HEAD_DIM=head_dim,
        PAGE_SIZE=page_size,
        BLOCK_M=block_m,
        BLOCK_N=64 if block_d <= 128 else 32,
        BLOCK_D=block_d,
        PRECISION=dot_precision(q.dtype),
        num_warps=4,
        num_stages=2,
        **pdl_launch_options(q),
    )
    return out
