"""Paged decode attention: one new query token per request against its whole cached K/V, in one
launch per layer (chapter 10).

grid (requests, kv_heads, splits), split-K ("flash-decoding"): each program takes one request, one
KV head and one of `num_splits` equal slices of that request's KV positions, and attends with all
the query heads that share the KV head (GQA: the group's queries form the rows of one small matrix
product, so each K/V tile is read once per group, not once per query head). It keeps the slice's
softmax-normalised output and log-sum-exp. The last of a (request, KV head)'s programs to finish
merges the slices, weighting slice s by exp(lse_s - logsumexp(lse)): each program counts itself in
an atomic counter, and the one that brings it to `num_splits` reads the others' slices back and
resets the counter for the next launch. With one split the program writes the output directly.

Work that would be launches of their own happens in the programs too:
- the new token's K/V (`new_kv`): the program whose slice holds the new position writes them into
  the pool before reading it (no `store_kv` launch);
- its positional work (`rope`): q and the new k arrive as the qkv projection wrote them, and each
  program applies Qwen3's per-head RMSNorm (when given) and the rotate-half RoPE of the token's
  position itself, rounding where the separate kernels round (no norm or RoPE launch). Each program
  rotates the q heads of its group (a few hundred values); the program storing the new k rotates it.

Launched with PDL (pdl.py, batches of at most SMALL_BATCH_ROWS), a program loads its slice's first
K/V tile, the page table and the request's lengths before it waits for the previous kernel: nothing
in the step writes them (the host wrote the inputs before the step, the cache holds earlier steps'
tokens), so only the q/k/v loads wait. The new token's row, stale in that early tile, is replaced
by the k/v it just stored.

Splitting keeps the GPU busy when requests x KV heads is small (batch 1 has 3-8 programs without
it). The caller picks the number of splits (`decode_num_splits` in minisgl/attention/
triton_backend.py: from the batch size rounded up to a power of two, so CUDA-graph padding never
changes it); a request decoded in a batch of another size may round slightly differently.

KV position p of a request with page-table row r lives in slot
`page_table[r, p // page_size] * page_size + p % page_size`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from minisgl.kernel import SMALL_BATCH_ROWS

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
    v = tl.load(v_cache_ptr + kv_offs, mask=kv_mask, other=0.0)  # loaded late: fewer registers held
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
    return m_new, l_i, acc


@triton.jit
def attend_first_tile(q, k, v, visible, scale_log2, PRECISION: tl.constexpr):
    """The online softmax's state (m, l, acc) after a first tile whose K and V [BLOCK_N, D] are
    loaded already (`attend_kv_tile` loads its own). A slice with no keys leaves m = -inf, l = 0."""
    scores = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale_log2  # [rows, BLOCK_N], log2 units
    scores = tl.where(visible, scores, float("-inf"))
    m = tl.max(scores, 1)
    p = tl.exp2(scores - tl.where(m == float("-inf"), 0.0, m)[:, None])  # exp2(-inf - -inf) would be NaN
    return m, tl.sum(p, 1), tl.dot(p.to(v.dtype), v, input_precision=PRECISION)


@triton.jit
def normed_rotated_heads(src, head_offs, dims, mask, cos, sin, norm_weight_ptr, eps,
                         HALF: tl.constexpr, HEAD_DIM: tl.constexpr, QK_NORM: tl.constexpr):
    """Heads of one token [rows, BLOCK_D] at `src + head_offs` [rows, 1]: RMSNorm over each head
    (QK_NORM) then rotate-half RoPE, each rounded to src's dtype as the separate kernels round.
    cos, sin [BLOCK_D]: the angle of pair (d, d + HALF) at both of its dims."""
    dtype = src.dtype.element_ty
    partner = tl.where(dims < HALF, dims + HALF, dims - HALF)  # the other dim of d's rotation pair
    x = tl.load(src + head_offs + dims[None, :], mask=mask, other=0.0).to(tl.float32)
    pair = tl.load(src + head_offs + partner[None, :], mask=mask, other=0.0).to(tl.float32)
    if QK_NORM:
        inv_rms = 1.0 / tl.sqrt(tl.sum(x * x, 1) / HEAD_DIM + eps)  # [rows]
        w = tl.load(norm_weight_ptr + dims, mask=dims < HEAD_DIM, other=0.0).to(tl.float32)
        w_pair = tl.load(norm_weight_ptr + partner, mask=dims < HEAD_DIM, other=0.0).to(tl.float32)
        x = ((x * inv_rms[:, None]).to(dtype).to(tl.float32) * w[None, :]).to(dtype).to(tl.float32)
        pair = ((pair * inv_rms[:, None]).to(dtype).to(tl.float32) * w_pair[None, :]).to(dtype).to(tl.float32)
    sign = tl.where(dims < HALF, -1.0, 1.0)  # (a, b) -> (a cos - b sin, b cos + a sin)
    return (x * cos[None, :] + sign[None, :] * pair * sin[None, :]).to(dtype)


@triton.jit
def _decode_kernel(
    q_ptr,  # [reqs, q_heads, head_dim]
    k_cache_ptr,  # [slots, kv_heads, head_dim]
    v_cache_ptr,
    page_table_ptr,  # [rows, max_pages] int32
    req_rows_ptr,  # [reqs] int32
    seq_lens_ptr,  # [reqs] int32
    new_k_ptr,  # [reqs, kv_heads, head_dim]: the new token's K (STORE_NEW_KV)
    new_v_ptr,
    new_slots_ptr,  # [reqs]: its slot in the pool, -1 for CUDA-graph padding rows
    positions_ptr,  # [reqs]: the new token's position (ROPE)
    cos_sin_ptr,  # [max_position, head_dim] = [cos | sin] (ROPE)
    q_norm_ptr,  # [head_dim] (QK_NORM)
    k_norm_ptr,
    out_ptr,  # [reqs, q_heads, head_dim]
    partial_ptr,  # [reqs, q_heads, splits, head_dim] fp32, contiguous: each slice's output (not DIRECT)
    lse_ptr,  # [reqs, q_heads, splits] fp32: each slice's log-sum-exp, log2 units
    counter_ptr,  # [>= reqs * kv_heads] int32, zero between launches: slices done per (request, KV head)
    scale_log2,  # softmax scale * log2(e): exp2 instead of exp
    eps,  # of the q/k norms
    q_req_stride,
    q_head_stride,
    new_k_req_stride,
    new_v_req_stride,
    cache_slot_stride,
    cache_head_stride,
    page_table_stride,
    out_req_stride,
    out_head_stride,
    NUM_HEADS: tl.constexpr,
    NUM_KV_HEADS: tl.constexpr,
    GROUP: tl.constexpr,  # query heads per KV head
    HEAD_DIM: tl.constexpr,
    PAGE_SIZE: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
    DIRECT: tl.constexpr,  # one split: write the final output, no lse, no merge
    BLOCK_H: tl.constexpr,  # GROUP padded to >= 16 (the smallest tl.dot)
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    PRECISION: tl.constexpr,  # see dot_precision
    STORE_NEW_KV: tl.constexpr,
    ROPE: tl.constexpr,  # q and the new k still need RoPE (and QK_NORM) here
    QK_NORM: tl.constexpr,
    EARLY_TILE: tl.constexpr,  # load the first K/V tile before the wait (small batches)
    USE_PDL: tl.constexpr,
):
    req = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    let_next_kernel_launch(USE_PDL)
    # Before waiting for the previous kernel, load what no kernel of this step writes: the host's
    # per-request inputs, the page table, the RoPE angles, and for a small batch (PDL's) the slice's
    # first K/V tile (cached by earlier steps; the new token's row, stale there, is patched in below).
    # A large batch has no wait to hide, and a tile held over the loop costs registers: its loop
    # loads every tile (benchmark/GPU_RESULTS.md: the offline run that held it there was slower).
    seq_len = tl.load(seq_lens_ptr + req)
    row = tl.load(req_rows_ptr + req).to(tl.int64)
    split_len = tl.cdiv(tl.cdiv(seq_len, NUM_SPLITS), BLOCK_N) * BLOCK_N
    start = split * split_len
    end = tl.minimum(start + split_len, seq_len)
    dims = tl.arange(0, BLOCK_D)
    dim_mask = dims < HEAD_DIM
    if EARLY_TILE:
        first_pos = start + tl.arange(0, BLOCK_N)  # [BLOCK_N] the first tile's positions
        first_mask = first_pos < end
        page = tl.load(page_table_ptr + row * page_table_stride + first_pos // PAGE_SIZE, mask=first_mask, other=0)
        slot = page.to(tl.int64) * PAGE_SIZE + first_pos % PAGE_SIZE
        kv_offs = slot[:, None] * cache_slot_stride + kv_head * cache_head_stride + dims[None, :]
        kv_mask = first_mask[:, None] & dim_mask[None, :]
        k_tile = tl.load(k_cache_ptr + kv_offs, mask=kv_mask, other=0.0)  # [BLOCK_N, BLOCK_D]
        v_tile = tl.load(v_cache_ptr + kv_offs, mask=kv_mask, other=0.0)
    if ROPE:
        half = dims % (HEAD_DIM // 2)
        pos = tl.load(positions_ptr + req).to(tl.int64)
        cos = tl.load(cos_sin_ptr + pos * HEAD_DIM + half, mask=dim_mask, other=0.0).to(tl.float32)
        sin = tl.load(cos_sin_ptr + pos * HEAD_DIM + HEAD_DIM // 2 + half, mask=dim_mask, other=0.0).to(tl.float32)
    if STORE_NEW_KV:
        new_slot = tl.load(new_slots_ptr + req).to(tl.int64)
    wait_previous_kernel(USE_PDL)

    heads = kv_head * GROUP + tl.arange(0, BLOCK_H)  # [BLOCK_H]
    head_mask = tl.arange(0, BLOCK_H) < GROUP
    q_mask = head_mask[:, None] & dim_mask[None, :]
    q_src = q_ptr + req.to(tl.int64) * q_req_stride
    if STORE_NEW_KV:  # the slice holding position seq_len - 1 writes this KV head's new K/V first
        owns_new = (seq_len - 1 >= start) & (seq_len - 1 < end) & (new_slot >= 0)
        new_mask = (dim_mask & owns_new)[None, :]  # [1, BLOCK_D]
        k_src = new_k_ptr + req.to(tl.int64) * new_k_req_stride
        k_head = tl.zeros([1, 1], tl.int32) + kv_head * HEAD_DIM  # [1, 1]: one head
        if ROPE:
            new_k = normed_rotated_heads(k_src, k_head, dims, new_mask, cos, sin, k_norm_ptr, eps,
                                         HEAD_DIM // 2, HEAD_DIM, QK_NORM)  # [1, BLOCK_D]
        else:
            new_k = tl.load(k_src + k_head + dims[None, :], mask=new_mask)
        new_v = tl.load(new_v_ptr + req.to(tl.int64) * new_v_req_stride + k_head + dims[None, :], mask=new_mask)
        new_k, new_v = new_k.to(k_cache_ptr.dtype.element_ty), new_v.to(v_cache_ptr.dtype.element_ty)
        new_offs = new_slot * cache_slot_stride + kv_head * cache_head_stride + dims[None, :]
        tl.store(k_cache_ptr + new_offs, new_k, mask=new_mask)
        tl.store(v_cache_ptr + new_offs, new_v, mask=new_mask)
        if EARLY_TILE:
            is_new = ((first_pos == seq_len - 1) & owns_new)[:, None]  # [BLOCK_N, 1]
            k_tile = tl.where(is_new, new_k, k_tile)
            v_tile = tl.where(is_new, new_v, v_tile)
        tl.debug_barrier()  # the loop reads that slot back: every thread must see the store

    if ROPE:
        q = normed_rotated_heads(q_src, heads[:, None] * q_head_stride, dims, q_mask, cos, sin, q_norm_ptr, eps,
                                 HEAD_DIM // 2, HEAD_DIM, QK_NORM)  # [BLOCK_H, BLOCK_D]
    else:
        q = tl.load(q_src + heads[:, None] * q_head_stride + dims[None, :], mask=q_mask, other=0.0)

    if EARLY_TILE:  # the running max, the sum of exp2(score - max), the unscaled output
        m_i, l_i, acc = attend_first_tile(q, k_tile, v_tile, first_mask[None, :], scale_log2, PRECISION)
        loop_start = start + BLOCK_N
    else:
        m_i = tl.full([BLOCK_H], float("-inf"), tl.float32)  # (log2 units)
        l_i = tl.zeros([BLOCK_H], tl.float32)
        acc = tl.zeros([BLOCK_H, BLOCK_D], tl.float32)
        loop_start = start
    for block_start in range(loop_start, end, BLOCK_N):
        pos_n = block_start + tl.arange(0, BLOCK_N)
        pos_mask = pos_n < end
        page = tl.load(page_table_ptr + row * page_table_stride + pos_n // PAGE_SIZE, mask=pos_mask, other=0)
        slot = page.to(tl.int64) * PAGE_SIZE + pos_n % PAGE_SIZE  # [BLOCK_N]
        kv_offs = slot[:, None] * cache_slot_stride + kv_head * cache_head_stride + dims[None, :]
        kv_mask = pos_mask[:, None] & dim_mask[None, :]
        m_i, l_i, acc = attend_kv_tile(q, k_cache_ptr, v_cache_ptr, kv_offs, kv_mask, pos_mask[None, :],
                                       m_i, l_i, acc, scale_log2, PRECISION)

    has_keys = l_i > 0  # an empty slice (short request, many splits) contributes nothing
    out = acc / tl.where(has_keys, l_i, 1.0)[:, None]
    final = out_ptr + req.to(tl.int64) * out_req_stride + heads[:, None] * out_head_stride + dims[None, :]
    if DIRECT:
        tl.store(final, out.to(out_ptr.dtype.element_ty), mask=q_mask)
    else:
        slices = (req.to(tl.int64) * NUM_HEADS + heads) * NUM_SPLITS  # [BLOCK_H]: this group's split 0
        tl.store(partial_ptr + (slices + split)[:, None] * HEAD_DIM + dims[None, :], out, mask=q_mask)
        lse = tl.where(has_keys, m_i + tl.log2(tl.where(has_keys, l_i, 1.0)), float("-inf"))  # log2 units
        tl.store(lse_ptr + slices + split, lse, mask=head_mask)
        # Count this slice as done once every thread's stores are out; the atomic orders them
        # (acquire-release, GPU scope) before the last program's reads.
        tl.debug_barrier()
        counter = counter_ptr + req * NUM_KV_HEADS + kv_head
        if tl.atomic_add(counter, 1) == NUM_SPLITS - 1:  # the last slice in: merge them all
            _merge_slices(partial_ptr, lse_ptr, final, slices, dims, head_mask, q_mask, HEAD_DIM, NUM_SPLITS)
            tl.atomic_xchg(counter, 0)  # zero again for the next launch (the next layer, the next replay)


@triton.jit
def _merge_slices(partial_ptr, lse_ptr, final, slices, dims, head_mask, q_mask,
                  HEAD_DIM: tl.constexpr, NUM_SPLITS: tl.constexpr):
    """out = sum_s w_s out_s with w_s = 2^(lse_s - max lse) / sum_r 2^(lse_r - max lse), for the
    group's heads. Slice 0 always holds keys, so the max is finite. The slices were written by other
    programs: read them from L2 (".cg"), past this SM's L1."""
    lse_max = tl.full(slices.shape, float("-inf"), tl.float32)
    for s in tl.static_range(NUM_SPLITS):
        lse_max = tl.maximum(lse_max, tl.load(lse_ptr + slices + s, mask=head_mask, other=0.0, cache_modifier=".cg"))
    total = tl.zeros(slices.shape, tl.float32)
    merged = tl.zeros(q_mask.shape, tl.float32)
    for s in tl.static_range(NUM_SPLITS):
        weight = tl.exp2(tl.load(lse_ptr + slices + s, mask=head_mask, other=0.0, cache_modifier=".cg") - lse_max)
        part = tl.load(partial_ptr + (slices + s)[:, None] * HEAD_DIM + dims[None, :], mask=q_mask, other=0.0,
                       cache_modifier=".cg")
        total += weight
        merged += weight[:, None] * part
    tl.store(final, (merged / total[:, None]).to(final.dtype.element_ty), mask=q_mask)


@dataclass
class DecodeRope:
    """The positional work the decode kernel does on q and the new k (`decode_attention(rope=...)`):
    the rotate-half RoPE of each token's position, after Qwen3's per-head RMSNorm where given."""

    positions: torch.Tensor  # [reqs]
    cos_sin: torch.Tensor  # [max_position, head_dim] = [cos | sin] (minisgl/layers/rotary.py)
    q_norm: torch.Tensor | None = None  # [head_dim]
    k_norm: torch.Tensor | None = None
    eps: float = 0.0


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
    rope: DecodeRope | None = None,
    split_counters: torch.Tensor | None = None,
) -> torch.Tensor:
    """q [reqs, q_heads, d]; caches [slots, kv_heads, d] (one layer); page_table [rows, max_pages];
    req_rows, seq_lens [reqs] int32 (seq_len >= 1 counts the new token). The new token's K/V is
    already in the cache, or comes as new_kv = (k, v [reqs, kv_heads, d], slots [reqs]) and is
    stored by the kernel. With `rope` (and new_kv), q and the new k are not rotated yet: the kernel
    does it. `split_counters`: int32 zeros, at least reqs * kv_heads, that the kernel leaves zero
    (a caller that launches often keeps one; None: a fresh one). Returns [reqs, q_heads, d]."""
    num_reqs, num_heads, head_dim = q.shape
    num_kv_heads = k_cache.shape[1]
    group = num_heads // num_kv_heads
    if out is None:
        out = torch.empty_like(q)
    if num_reqs == 0:
        return out
    if rope is not None and new_kv is None:
        raise ValueError("decode_attention(rope=...) rotates the new k as it stores it; pass new_kv too")
    if q.stride(-1) != 1:
        q = q.contiguous()
    block_d = max(16, triton.next_power_of_2(head_dim))
    direct = num_splits == 1
    if direct:
        partial, lse, counters = out, out, seq_lens  # unused
    else:
        partial = torch.empty(num_reqs, num_heads, num_splits, head_dim, dtype=torch.float32, device=q.device)
        lse = torch.empty(num_reqs, num_heads, num_splits, dtype=torch.float32, device=q.device)
        counters = split_counters
        if counters is None:
            counters = torch.zeros(num_reqs * num_kv_heads, dtype=torch.int32, device=q.device)
        assert counters.numel() >= num_reqs * num_kv_heads, "split_counters holds fewer than reqs * kv_heads"
    if new_kv is not None:
        new_k, new_v, new_slots = token_rows(new_kv[0]), token_rows(new_kv[1]), new_kv[2]
    else:
        new_k, new_v, new_slots = q, q, seq_lens  # unused (STORE_NEW_KV=False)
    positions, cos_sin = (rope.positions, rope.cos_sin) if rope is not None else (seq_lens, q)  # unused without
    q_norm = rope.q_norm if rope is not None and rope.q_norm is not None else q  # unused without QK_NORM
    k_norm = rope.k_norm if rope is not None and rope.k_norm is not None else q
    _decode_kernel[(num_reqs, num_kv_heads, num_splits)](
        q, k_cache, v_cache, page_table, req_rows, seq_lens, new_k, new_v, new_slots,
        positions, cos_sin, q_norm, k_norm, out, partial, lse, counters,
        scale * LOG2E, rope.eps if rope is not None else 0.0,
        q.stride(0), q.stride(1),
        new_k.stride(0), new_v.stride(0),
        k_cache.stride(0), k_cache.stride(1),
        page_table.stride(0),
        out.stride(0), out.stride(1),
        NUM_HEADS=num_heads,
        NUM_KV_HEADS=num_kv_heads,
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
        ROPE=rope is not None,
        QK_NORM=rope is not None and rope.q_norm is not None,
        EARLY_TILE=num_reqs <= SMALL_BATCH_ROWS,
        num_warps=4,
        num_stages=2,
        **pdl_launch_options(q),
    )
    return out
