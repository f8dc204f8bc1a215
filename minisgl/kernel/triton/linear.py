"""Small-batch linear layers (GEMV) with the work before them fused in (chapter 10).

At decode batch 1 a linear layer is a matrix-vector product: y[n] = sum_k W[n, k] * x[k]. It moves
the whole weight once and does two flops per weight, so its floor is the weight's bytes over the
memory bandwidth (0.26 us for SmolLM2's 1.1 MB qkv_proj on an H200). cuBLAS takes ~3.8 us there:
a GEMM kernel is built for tiles of many rows, and it is a separate launch from the RMSNorm or
SiLU kernel that produced its input. This kernel is one launch that
- streams a [BLOCK_N, BLOCK_K] tile of W per program, the next tile loading while the current one
  is multiplied, and starts loading before the previous kernel has finished (PDL, pdl.py);
- builds its input on the fly from the previous layer's output (`PROLOGUE`):
  * "rms_norm": r = x + residual (written back once, by the programs of column block 0), then
    RMSNorm(r) * norm_weight with Hugging Face's rounding (normalise in fp32, round to the model
    dtype, scale, round again). Every program recomputes the norm of the rows it needs: a few
    thousand values, from L2, far cheaper than a launch. A row that fits one tile (SmolLM2's 576,
    Qwen3-0.6B's 1024) is read once, and the norm's weight is loaded before the wait, like W's tile.
  * "silu_and_mul": silu(gate) * up from the fused gate_up output [rows, 2K].
grid (column blocks, rows): rows of a small batch re-read the same tile, mostly from L2.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .pdl import let_next_kernel_launch, pdl_launch_options, wait_previous_kernel

PROLOGUES = {"none": 0, "rms_norm": 1, "silu_and_mul": 2}


@triton.jit
def _row_chunk(x_ptr, residual_ptr, residual_out_ptr, row, k, k_mask, x_row_stride, residual_row_stride,
               write_residual, HAS_RESIDUAL: tl.constexpr, K: tl.constexpr):
    """x[row, k] [BLOCK_K], plus residual[row, k] when there is one (rounded as torch rounds the
    residual stream, and written back where `write_residual`)."""
    x = tl.load(x_ptr + row * x_row_stride + k, mask=k_mask, other=0.0)
    if HAS_RESIDUAL:
        r = tl.load(residual_ptr + row * residual_row_stride + k, mask=k_mask, other=0.0)
        x = (x.to(tl.float32) + r.to(tl.float32)).to(x_ptr.dtype.element_ty)
        tl.store(residual_out_ptr + row * K + k, x, mask=k_mask & write_residual)
    return x


@triton.jit
def _rms_normed(x, inv_rms, norm_w):
    """RMSNorm(x) * norm_w with Hugging Face's rounding: normalise in fp32, round, scale, round."""
    normed = (x.to(tl.float32) * inv_rms).to(x.dtype)
    return (normed.to(tl.float32) * norm_w.to(tl.float32)).to(x.dtype)


@triton.jit
def _input_chunk(
    x_ptr, residual_ptr, residual_out_ptr, norm_weight_ptr, row, k, k_mask, x_row_stride, residual_row_stride,
    inv_rms, write_residual, PROLOGUE: tl.constexpr, HAS_RESIDUAL: tl.constexpr, K: tl.constexpr,
):
    """Input values k of `row` [BLOCK_K], in the weight's dtype, as the unfused layers compute them."""
    if PROLOGUE == 2:  # silu_and_mul: gate = x[:, :K], up = x[:, K:]
        x_row = x_ptr + row * x_row_stride
        gate = tl.load(x_row + k, mask=k_mask, other=0.0).to(tl.float32)
        up = tl.load(x_row + K + k, mask=k_mask, other=0.0).to(tl.float32)
        x = (gate / (1.0 + tl.exp(-gate)) * up).to(x_ptr.dtype.element_ty)
    else:
        x = _row_chunk(x_ptr, residual_ptr, residual_out_ptr, row, k, k_mask, x_row_stride, residual_row_stride,
                       write_residual, HAS_RESIDUAL, K)
        if PROLOGUE == 1:
            x = _rms_normed(x, inv_rms, tl.load(norm_weight_ptr + k, mask=k_mask, other=0.0))
    return x


@triton.jit
def _small_batch_linear_kernel(
    x_ptr,  # [rows, K] ([rows, 2K] for silu_and_mul)
    residual_ptr,  # [rows, K] (rms_norm with a residual)
    residual_out_ptr,  # [rows, K]: x + residual
    norm_weight_ptr,  # [K]
    weight_ptr,  # [N, K], each row contiguous; rows `w_row_stride` elements apart
    bias_ptr,  # [N]
    out_ptr,  # [rows, N]
    N,
    x_row_stride,
    w_row_stride,
    residual_row_stride,
    eps,
    K: tl.constexpr,
    PROLOGUE: tl.constexpr,
    HAS_RESIDUAL: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    pid_n = tl.program_id(0)
    row = tl.program_id(1).to(tl.int64)
    let_next_kernel_launch(USE_PDL)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # [BLOCK_N] output features
    col_mask = cols < N
    k = tl.arange(0, BLOCK_K)
    w_rows = weight_ptr + cols[:, None].to(tl.int64) * w_row_stride
    # The weights are not written by any kernel: load the first tile (and the norm's weight) before
    # waiting for the input.
    w = tl.load(w_rows + k[None, :], mask=col_mask[:, None] & (k[None, :] < K), other=0.0)  # [BLOCK_N, BLOCK_K]
    if PROLOGUE == 1 and K <= BLOCK_K:
        norm_w = tl.load(norm_weight_ptr + k, mask=k < K, other=0.0)
    wait_previous_kernel(USE_PDL)

    if PROLOGUE == 1 and K <= BLOCK_K:  # the row fits one tile: load it once, norm it, multiply
        x = _row_chunk(x_ptr, residual_ptr, residual_out_ptr, row, k, k < K, x_row_stride, residual_row_stride,
                       pid_n == 0, HAS_RESIDUAL, K)
        xf = x.to(tl.float32)
        x = _rms_normed(x, 1.0 / tl.sqrt(tl.sum(xf * xf, 0) / K + eps), norm_w)
        acc = tl.sum(w.to(tl.float32) * x.to(tl.float32)[None, :], 1)
    else:
        inv_rms = 0.0
        if PROLOGUE == 1:  # sum of squares of the whole row first
            sum_sq = tl.zeros([BLOCK_K], tl.float32)
            for k0 in range(0, K, BLOCK_K):
                kk = k0 + k
                x = _row_chunk(x_ptr, residual_ptr, residual_out_ptr, row, kk, kk < K, x_row_stride,
                               residual_row_stride, False, HAS_RESIDUAL, K)
                xf = x.to(tl.float32)
                sum_sq += xf * xf
            inv_rms = 1.0 / tl.sqrt(tl.sum(sum_sq, 0) / K + eps)
        acc = tl.zeros([BLOCK_N], tl.float32)
        for k0 in range(0, K, BLOCK_K):
            kk = k0 + k
            k_mask = kk < K
            x = _input_chunk(x_ptr, residual_ptr, residual_out_ptr, norm_weight_ptr, row, kk, k_mask, x_row_stride,
                             residual_row_stride, inv_rms, pid_n == 0, PROLOGUE, HAS_RESIDUAL, K)
            acc += tl.sum(w.to(tl.float32) * x.to(tl.float32)[None, :], 1)
            next_k = kk + BLOCK_K  # prefetch the next tile (all masked after the last one)
            w = tl.load(w_rows + next_k[None, :], mask=col_mask[:, None] & (next_k[None, :] < K), other=0.0)
    if HAS_BIAS:
        acc += tl.load(bias_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * N + cols, acc.to(out_ptr.dtype.element_ty), mask=col_mask)


def small_batch_linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    prologue: str = "none",
    norm_weight: torch.Tensor | None = None,
    eps: float = 0.0,
    residual: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """prologue(x) @ weight.T + bias for x [rows, K] (silu_and_mul: [rows, 2K]), a few rows
    (minisgl.kernel.SMALL_BATCH_ROWS); weight [N, K], a slice of a bigger weight too.
    Returns (y [rows, N], x + residual [rows, K] when rms_norm had a residual)."""
    code = PROLOGUES[prologue]
    rows, n, k = x.shape[0], weight.shape[0], weight.shape[1]
    if x.stride(-1) != 1:
        x = x.contiguous()
    if weight.stride(-1) != 1:
        # The kernel streams each row of W with unit stride. A row-parallel shard cut from the full
        # weight (`down.chunk(tp, dim=1)[rank]`) keeps that and only has a longer row stride, which
        # the kernel takes as an argument; a transposed view does not: copy it.
        weight = weight.contiguous()
    out = torch.empty(rows, n, dtype=x.dtype, device=x.device)
    residual_out = None
    if residual is not None:
        if residual.stride(-1) != 1:
            residual = residual.contiguous()
        residual_out = torch.empty(rows, k, dtype=x.dtype, device=x.device)
    if rows == 0:
        return out, residual_out
    block_k = min(triton.next_power_of_2(k), 2048)
    block_n = max(1, min(16, 8192 // block_k))  # <= 8192 weights in flight per program (32 registers a thread)
    _small_batch_linear_kernel[(triton.cdiv(n, block_n), rows)](
        x, residual if residual is not None else x, residual_out if residual_out is not None else out,
        norm_weight if norm_weight is not None else weight, weight, bias if bias is not None else weight, out,
        n, x.stride(0), weight.stride(0), residual.stride(0) if residual is not None else 0, eps,
        K=k, PROLOGUE=code, HAS_RESIDUAL=residual is not None, HAS_BIAS=bias is not None,
        BLOCK_N=block_n, BLOCK_K=block_k, num_warps=4, **pdl_launch_options(x),
    )
    return out, residual_out
