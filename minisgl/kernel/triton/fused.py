"""Small fused kernels for the layers' elementwise work on CUDA (chapter 10).

In eager torch, a decode step of a small model is mostly launches: RoPE alone is ~15 tiny kernels
per layer (index, 4 products, 2 sums, 2 concatenations for q and k), RMSNorm with its residual add
two or more, SiLU-and-multiply two. Each kernel here does one of those jobs in one launch, reading
its input once and writing its output once; the math runs in fp32, rounding where the torch code
rounds (the residual sum; the RMSNorm before and after its scale).

- `rms_norm(x, weight, eps, residual)`: optional `x + residual` (returned, rounded to x's dtype as
  torch would), then y = round(r / sqrt(mean(r^2) + eps)) * weight (Hugging Face's rounding order),
  over the last dim of a [rows, heads, d] view (q/k norm of Qwen3 normalises each head).
- `rope(positions, q, k, cos_sin)`: rotate-half RoPE of q and k in one launch.
- `silu_and_mul(gate_up)`: silu(gate) * up.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .pdl import let_next_kernel_launch, pdl_launch_options, wait_previous_kernel


@triton.jit
def _rms_norm_kernel(
    x_ptr, residual_ptr, residual_out_ptr, weight_ptr, out_ptr,
    x_row_stride, x_head_stride, residual_row_stride, num_heads, eps,
    DIM: tl.constexpr, BLOCK: tl.constexpr, HAS_RESIDUAL: tl.constexpr, USE_PDL: tl.constexpr,
):
    pid = tl.program_id(0)  # one (row, head) vector of DIM values
    let_next_kernel_launch(USE_PDL)
    wait_previous_kernel(USE_PDL)
    row = (pid // num_heads).to(tl.int64)
    head = pid % num_heads
    cols = tl.arange(0, BLOCK)
    mask = cols < DIM
    x = tl.load(x_ptr + row * x_row_stride + head * x_head_stride + cols, mask=mask, other=0.0)
    if HAS_RESIDUAL:
        r = tl.load(residual_ptr + row * residual_row_stride + cols, mask=mask, other=0.0)
        x = (x.to(tl.float32) + r.to(tl.float32)).to(x_ptr.dtype.element_ty)  # the stream, as torch rounds it
        tl.store(residual_out_ptr + row * DIM + cols, x, mask=mask)
    xf = x.to(tl.float32)
    inv_rms = 1.0 / tl.sqrt(tl.sum(xf * xf, 0) / DIM + eps)
    normed = (xf * inv_rms).to(x_ptr.dtype.element_ty).to(tl.float32)  # rounded before the scale, as HF does
    w = tl.load(weight_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + pid.to(tl.int64) * DIM + cols, (normed * w).to(out_ptr.dtype.element_ty), mask=mask)


def rms_norm(
    x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """x [..., d] (any row strides, last dim contiguous) -> (normed, x + residual or None), both
    fresh and contiguous in x's shape."""
    dim = x.shape[-1]
    if x.stride(-1) != 1:
        x = x.contiguous()
    x3 = x if x.dim() == 3 else x.reshape(-1, 1, dim) if x.dim() != 2 else x.unsqueeze(1)  # [rows, heads, d]
    rows, heads = x3.shape[0], x3.shape[1]
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    residual_out = None
    if residual is not None:
        if residual.stride(-1) != 1:
            residual = residual.contiguous()
        residual_out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if rows * heads == 0:
        return out, residual_out
    _rms_norm_kernel[(rows * heads,)](
        x3, residual if residual is not None else x3, residual_out if residual_out is not None else out, weight, out,
        x3.stride(0), x3.stride(1), residual.stride(0) if residual is not None else 0, heads, eps,
        DIM=dim, BLOCK=triton.next_power_of_2(dim), HAS_RESIDUAL=residual is not None,
        num_warps=4 if dim >= 1024 else 1, **pdl_launch_options(x),
    )
    return out, residual_out


@triton.jit
def _rotate_heads(src, dst, token, token_stride, head_stride, cos, sin,
                  NUM_HEADS: tl.constexpr, HALF: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr):
    """Rotate the NUM_HEADS heads of one token: (a, b) -> (a cos - b sin, b cos + a sin) per pair."""
    heads = tl.arange(0, BLOCK_H)[:, None]
    dims = tl.arange(0, BLOCK_D)[None, :]
    mask = (heads < NUM_HEADS) & (dims < HALF)
    base = src + token * token_stride + heads * head_stride + dims
    first = tl.load(base, mask=mask, other=0.0).to(tl.float32)
    second = tl.load(base + HALF, mask=mask, other=0.0).to(tl.float32)
    out = dst + token * (NUM_HEADS * 2 * HALF) + heads * (2 * HALF) + dims
    tl.store(out, (first * cos - second * sin).to(dst.dtype.element_ty), mask=mask)
    tl.store(out + HALF, (second * cos + first * sin).to(dst.dtype.element_ty), mask=mask)


@triton.jit
def _rope_kernel(
    q_ptr, k_ptr, q_out_ptr, k_out_ptr, cos_sin_ptr, positions_ptr,
    q_token_stride, q_head_stride, k_token_stride, k_head_stride,
    NUM_Q_HEADS: tl.constexpr, NUM_K_HEADS: tl.constexpr, HALF: tl.constexpr,
    BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_D: tl.constexpr, USE_PDL: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)
    let_next_kernel_launch(USE_PDL)
    wait_previous_kernel(USE_PDL)
    pos = tl.load(positions_ptr + token).to(tl.int64)
    dims = tl.arange(0, BLOCK_D)
    dim_mask = dims < HALF
    cos = tl.load(cos_sin_ptr + pos * (2 * HALF) + dims, mask=dim_mask, other=0.0).to(tl.float32)[None, :]
    sin = tl.load(cos_sin_ptr + pos * (2 * HALF) + HALF + dims, mask=dim_mask, other=0.0).to(tl.float32)[None, :]
    _rotate_heads(q_ptr, q_out_ptr, token, q_token_stride, q_head_stride, cos, sin, NUM_Q_HEADS, HALF, BLOCK_Q, BLOCK_D)
    _rotate_heads(k_ptr, k_out_ptr, token, k_token_stride, k_head_stride, cos, sin, NUM_K_HEADS, HALF, BLOCK_K, BLOCK_D)


def rope(
    positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, cos_sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """q [tokens, q_heads, d], k [tokens, k_heads, d] (head dim contiguous); cos_sin
    [max_position, d] = [cos | sin] halves. Returns rotated contiguous copies."""
    tokens, num_q, dim = q.shape
    num_k = k.shape[1]
    q_out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    k_out = torch.empty(k.shape, dtype=k.dtype, device=k.device)
    if tokens == 0:
        return q_out, k_out
    if q.stride(-1) != 1:
        q = q.contiguous()
    if k.stride(-1) != 1:
        k = k.contiguous()
    _rope_kernel[(tokens,)](
        q, k, q_out, k_out, cos_sin, positions,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1),
        NUM_Q_HEADS=num_q, NUM_K_HEADS=num_k, HALF=dim // 2,
        BLOCK_Q=triton.next_power_of_2(num_q), BLOCK_K=triton.next_power_of_2(num_k),
        BLOCK_D=triton.next_power_of_2(dim // 2),
        num_warps=4 if num_q * dim >= 2048 else 1, **pdl_launch_options(q),
    )
    return q_out, k_out


@triton.jit
def _silu_and_mul_kernel(gate_up_ptr, out_ptr, row_stride, SIZE: tl.constexpr, BLOCK: tl.constexpr,
                         USE_PDL: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    let_next_kernel_launch(USE_PDL)
    wait_previous_kernel(USE_PDL)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < SIZE
    gate = tl.load(gate_up_ptr + row * row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(gate_up_ptr + row * row_stride + SIZE + cols, mask=mask, other=0.0).to(tl.float32)
    out = gate / (1.0 + tl.exp(-gate)) * up
    tl.store(out_ptr + row * SIZE + cols, out.to(out_ptr.dtype.element_ty), mask=mask)


def silu_and_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """[tokens, 2 * size] -> [tokens, size]."""
    if gate_up.stride(-1) != 1:
        gate_up = gate_up.contiguous()
    tokens, size = gate_up.shape[0], gate_up.shape[1] // 2
    out = torch.empty(tokens, size, dtype=gate_up.dtype, device=gate_up.device)
    if tokens == 0:
        return out
    block = min(triton.next_power_of_2(size), 2048)
    _silu_and_mul_kernel[(tokens, triton.cdiv(size, block))](gate_up, out, gate_up.stride(0), SIZE=size, BLOCK=block,
                                                             num_warps=4, **pdl_launch_options(gate_up))
    return out
