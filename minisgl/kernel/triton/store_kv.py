"""Scatter the new tokens' K and V into their KV-pool slots, one program per (token, chunk of row)
(chapter 10).

A token whose slot is negative writes nowhere: CUDA-graph padding rows use slot -1, so a replay
padded from 3 to 4 requests never touches the cache on behalf of the fourth.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .pdl import let_next_kernel_launch, pdl_launch_options, wait_previous_kernel


@triton.jit
def _store_kv_kernel(
    k_ptr,
    v_ptr,
    k_cache_ptr,
    v_cache_ptr,
    slots_ptr,
    k_token_stride,
    v_token_stride,
    cache_slot_stride,
    ROW: tl.constexpr,  # kv_heads * head_dim: one token's K (or V), contiguous
    BLOCK: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    let_next_kernel_launch(USE_PDL)
    wait_previous_kernel(USE_PDL)
    token = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    slot = tl.load(slots_ptr + token).to(tl.int64)
    mask = (offs < ROW) & (slot >= 0)
    src = token.to(tl.int64)
    k = tl.load(k_ptr + src * k_token_stride + offs, mask=mask)
    v = tl.load(v_ptr + src * v_token_stride + offs, mask=mask)
    tl.store(k_cache_ptr + slot * cache_slot_stride + offs, k, mask=mask)
    tl.store(v_cache_ptr + slot * cache_slot_stride + offs, v, mask=mask)


def token_rows(x: torch.Tensor) -> torch.Tensor:
    """[tokens, kv_heads, head_dim] with each token's row contiguous (a strided token dim is fine:
    v is a view into the fused qkv output)."""
    if x.stride(-1) != 1 or x.stride(-2) != x.shape[-1]:
        x = x.contiguous()
    return x


def store_kv(
    k_cache: torch.Tensor, v_cache: torch.Tensor, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor
) -> None:
    """k_cache, v_cache [num_slots, kv_heads, head_dim] (one layer); slots [tokens] (int32/64,
    negative = skip); k, v [tokens, kv_heads, head_dim]."""
    num_tokens = k.shape[0]
    if num_tokens == 0:
        return
    k, v = token_rows(k), token_rows(v)
    row = k.shape[1] * k.shape[2]
    block = min(triton.next_power_of_2(row), 1024)
    grid = (num_tokens, triton.cdiv(row, block))
    _store_kv_kernel[grid](
        k, v, k_cache, v_cache, slots, k.stride(0), v.stride(0), k_cache.stride(0), ROW=row, BLOCK=block,
        **pdl_launch_options(k),
    )
