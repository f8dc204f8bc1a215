"""Fused mixture-of-experts on CUDA: every expert's MLP as two grouped GEMMs over expert-sorted
tokens (chapter 14; the torch loop it replaces is `TorchKernels.expert_outputs` in minisgl/layers/kernels.py).

The (token, slot) pairs are sorted by expert and each expert's run is padded to a multiple of
BLOCK_M, so that every block of BLOCK_M sorted rows belongs to one expert (`align_by_expert`, torch
ops that never wait for the device: a CUDA graph can capture them). Then:
1. grid (blocks, inter tiles): rows x[token] @ gate_up[expert].T, the gate and up tiles side by
   side, SiLU(gate) * up in fp32 -> `inter` [sorted rows, inter];
2. grid (blocks, hidden tiles): inter @ down[expert].T, each row written to its pair's place.
Padding rows (pair id = pairs) are computed in step 1 on masked-out zeros and never written in 2;
blocks past the last expert's run (expert id = num_experts) return at once.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .decode_attention import dot_precision


def align_by_expert(experts: torch.Tensor, num_experts: int, block_m: int) -> tuple[torch.Tensor, torch.Tensor]:
    """experts [pairs] -> (sorted_pairs [blocks * block_m]: pair ids sorted by expert, each expert's run
    padded with the id `pairs`; block_expert [blocks]: each block's expert, num_experts past the end).
    `blocks` is an upper bound known on the host: at most min(pairs, experts) runs get padded."""
    pairs = experts.numel()
    blocks = triton.cdiv(pairs + min(pairs, num_experts) * (block_m - 1), block_m)
    ones = torch.ones_like(experts)
    counts = torch.zeros(num_experts, dtype=experts.dtype, device=experts.device).scatter_add_(0, experts, ones)
    padded = (counts + block_m - 1) // block_m * block_m
    padded_end = torch.cumsum(padded, 0)  # [experts]: where each expert's padded run ends
    order = torch.sort(experts, stable=True).indices  # [pairs]
    sorted_experts = experts[order]
    first = torch.cumsum(counts, 0) - counts  # each expert's first place among the sorted pairs
    rank_in_run = torch.arange(pairs, device=experts.device) - first[sorted_experts]
    sorted_pairs = torch.full((blocks * block_m,), pairs, dtype=experts.dtype, device=experts.device)
    sorted_pairs[padded_end[sorted_experts] - padded[sorted_experts] + rank_in_run] = order
    block_start = torch.arange(blocks, device=experts.device) * block_m
    block_expert = torch.searchsorted(padded_end, block_start, right=True)  # = num_experts past the end
    return sorted_pairs, block_expert


@triton.jit
def _gate_up_kernel(
    x_ptr, w_ptr, inter_ptr, sorted_pairs_ptr, block_expert_ptr,
    num_pairs, num_experts, top_k, hidden, inter_size,
    stride_x, stride_we, stride_wn, stride_inter,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PRECISION: tl.constexpr,
):
    block, tile = tl.program_id(0), tl.program_id(1)
    expert = tl.load(block_expert_ptr + block)
    if expert >= num_experts:
        return
    rows = block * BLOCK_M + tl.arange(0, BLOCK_M)  # [BLOCK_M] places in the sorted order
    pairs = tl.load(sorted_pairs_ptr + rows)
    valid = pairs < num_pairs
    tokens = pairs // top_k
    cols = tile * BLOCK_N + tl.arange(0, BLOCK_N)  # [BLOCK_N] intermediate columns
    col_ok = cols < inter_size
    gate = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    w_expert = w_ptr + expert.to(tl.int64) * stride_we
    for k0 in range(0, hidden, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        k_ok = ks < hidden
        a = tl.load(x_ptr + tokens[:, None].to(tl.int64) * stride_x + ks[None, :],
                    mask=valid[:, None] & k_ok[None, :], other=0.0)  # [BLOCK_M, BLOCK_K]
        w_mask = k_ok[:, None] & col_ok[None, :]
        w_gate = tl.load(w_expert + cols[None, :] * stride_wn + ks[:, None], mask=w_mask, other=0.0)  # [BLOCK_K, BLOCK_N]
        w_up = tl.load(w_expert + (cols[None, :] + inter_size) * stride_wn + ks[:, None], mask=w_mask, other=0.0)
        gate = tl.dot(a, w_gate, gate, input_precision=PRECISION)
        up = tl.dot(a, w_up, up, input_precision=PRECISION)
    out = gate / (1.0 + tl.exp(-gate)) * up  # SiLU(gate) * up, in fp32
    tl.store(inter_ptr + rows[:, None].to(tl.int64) * stride_inter + cols[None, :],
             out.to(inter_ptr.dtype.element_ty), mask=col_ok[None, :])


@triton.jit
def _down_kernel(
    inter_ptr, w_ptr, out_ptr, sorted_pairs_ptr, block_expert_ptr,
    num_pairs, num_experts, hidden, inter_size,
    stride_inter, stride_we, stride_wn, stride_out,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PRECISION: tl.constexpr,
):
    block, tile = tl.program_id(0), tl.program_id(1)
    expert = tl.load(block_expert_ptr + block)
    if expert >= num_experts:
        return
    rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
    pairs = tl.load(sorted_pairs_ptr + rows)
    valid = pairs < num_pairs
    cols = tile * BLOCK_N + tl.arange(0, BLOCK_N)  # [BLOCK_N] hidden columns
    col_ok = cols < hidden
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    w_expert = w_ptr + expert.to(tl.int64) * stride_we
    for k0 in range(0, inter_size, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        k_ok = ks < inter_size
        a = tl.load(inter_ptr + rows[:, None].to(tl.int64) * stride_inter + ks[None, :],
                    mask=valid[:, None] & k_ok[None, :], other=0.0)
        w = tl.load(w_expert + cols[None, :] * stride_wn + ks[:, None], mask=k_ok[:, None] & col_ok[None, :], other=0.0)
        acc = tl.dot(a, w, acc, input_precision=PRECISION)
    tl.store(out_ptr + pairs[:, None].to(tl.int64) * stride_out + cols[None, :],
             acc.to(out_ptr.dtype.element_ty), mask=valid[:, None] & col_ok[None, :])


def fused_expert_outputs(
    x: torch.Tensor, topk_ids: torch.Tensor, gate_up: torch.Tensor, down: torch.Tensor
) -> torch.Tensor:
    """x [tokens, hidden], topk_ids [tokens, k], gate_up [experts, 2 * inter, hidden], down [experts,
    hidden, inter] -> [tokens * k, hidden]: row token * k + slot is expert topk_ids[token, slot]'s
    (unweighted) output on x[token]. Same contract as `TorchKernels.expert_outputs`."""
    x, gate_up, down = x.contiguous(), gate_up.contiguous(), down.contiguous()
    num_experts, hidden, inter_size = down.shape
    top_k = topk_ids.shape[1]
    experts = topk_ids.reshape(-1)
    pairs = experts.numel()
    out = x.new_empty(pairs, hidden)
    if pairs == 0:
        return out
    block_m = 16 if pairs <= 256 else 64  # decode batches waste less on padding with small blocks
    sorted_pairs, block_expert = align_by_expert(experts, num_experts, block_m)
    blocks = block_expert.numel()
    inter = x.new_empty(blocks * block_m, inter_size)
    precision = dot_precision(x.dtype)
    block_n, block_k = 64, 32
    _gate_up_kernel[(blocks, triton.cdiv(inter_size, block_n))](
        x, gate_up, inter, sorted_pairs, block_expert, pairs, num_experts, top_k, hidden, inter_size,
        x.stride(0), gate_up.stride(0), gate_up.stride(1), inter.stride(0),
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, PRECISION=precision,
    )
    _down_kernel[(blocks, triton.cdiv(hidden, block_n))](
        inter, down, out, sorted_pairs, block_expert, pairs, num_experts, hidden, inter_size,
        inter.stride(0), down.stride(0), down.stride(1), out.stride(0),
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, PRECISION=precision,
    )
    return out
