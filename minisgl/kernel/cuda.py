"""CUDA's kernel table and fused decode layer: what `minisgl.kernel.accelerate` plugs into a model
built on a GPU (chapter 10).

- `TritonKernels`: the layers' ops (minisgl/layers/kernels.py) as Triton kernels: RMSNorm with its
  residual add, RoPE and SiLU-and-multiply in one launch each (triton/fused.py), the experts' MLPs
  as grouped GEMMs (triton/fused_moe.py), and matmuls of at most `SMALL_BATCH_ROWS` rows as a GEMV
  (triton/linear.py) instead of cuBLAS's GEMM.
- `FusedDecodeLayer`: a decoder layer's forward for decode batches of at most `SMALL_BATCH_ROWS`
  tokens, with the work between its matmuls moved into them: the norm (and residual add) before
  qkv_proj and gate_up_proj computed inside their GEMV, the SiLU-and-multiply inside down_proj's,
  Qwen3's q/k norms and RoPE inside the decode-attention kernel (the attention backend's
  `forward_rope`, which also stores the new K/V and merges its KV splits). Five launches a layer:
  qkv, attention, o_proj, gate_up, down. Same math as the plain forward, which larger batches run;
  the layer a decode step's kernels are fused in, so more fusion of the decode layer belongs here.
Both run inside CUDA graphs: a graph is captured per batch size, so each takes one path for good.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from minisgl.core import get_forward_context
from minisgl.distributed import all_reduce
from minisgl.layers import BaseOP, LinearBase, RMSNorm, TorchKernels, install_kernels
from minisgl.models.llama import LlamaAttention, LlamaDecoderLayer, LlamaMLP

from . import SMALL_BATCH_ROWS
from .triton.fused import rms_norm, rope, silu_and_mul
from .triton.fused_moe import fused_expert_outputs
from .triton.linear import small_batch_linear


def accelerate_cuda(model: BaseOP, fuse_decode_layers: bool) -> None:
    """Install the Triton kernel table for CUDA tensors and, with `fuse_decode_layers`, fuse every
    decoder layer's decode path."""
    install_kernels("cuda", TritonKernels())
    if not fuse_decode_layers:
        return
    for op in model.walk():
        if isinstance(op, LlamaDecoderLayer):
            op.forward = FusedDecodeLayer(op)


class TritonKernels(TorchKernels):
    """The kernel table of CUDA tensors."""

    def linear(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        if is_small_batch(x):  # decode: the weight stream is the whole cost
            return small_batch_linear(x, weight, bias)[0]
        return F.linear(x, weight, bias)

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float,
                 residual: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        normed, summed = rms_norm(x, weight, eps, residual)
        return normed, x if summed is None else summed

    def silu_and_mul(self, gate_up: torch.Tensor) -> torch.Tensor:
        return silu_and_mul(gate_up)

    def rope(self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor,
             cos_sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return rope(positions, q, k, cos_sin)

    def expert_outputs(self, x: torch.Tensor, topk_ids: torch.Tensor, gate_up: torch.Tensor,
                       down: torch.Tensor) -> torch.Tensor:
        return fused_expert_outputs(x, topk_ids, gate_up, down)


def is_small_batch(x: torch.Tensor) -> bool:
    """x [rows, features] of at most SMALL_BATCH_ROWS rows: a decode batch, which the GEMV serves."""
    return x.dim() == 2 and x.shape[0] <= SMALL_BATCH_ROWS


class FusedDecodeLayer:
    """`layer.forward` with its norms and SiLU-and-multiply inside the GEMVs of small batches."""

    def __init__(self, layer: LlamaDecoderLayer) -> None:
        self.layer = layer
        self.plain = layer.forward  # the class's forward, for batches above SMALL_BATCH_ROWS rows

    def __call__(
        self, positions: torch.Tensor, hidden_states: torch.Tensor, residual: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not is_small_batch(hidden_states):
            return self.plain(positions, hidden_states, residual)
        layer, attn = self.layer, self.layer.self_attn
        qkv, residual = normed_linear(layer.input_layernorm, attn.qkv_proj, hidden_states, residual)
        hidden_states = attn.o_proj.forward(attention(attn, qkv, positions))  # [tokens, hidden], all-reduced
        if not isinstance(layer.mlp, LlamaMLP):  # the experts' MLP takes the normed rows as they are
            hidden_states, residual = layer.post_attention_layernorm.forward_with_residual(hidden_states, residual)
            return layer.mlp.forward(hidden_states), residual
        mlp = layer.mlp
        gate_up, residual = normed_linear(layer.post_attention_layernorm, mlp.gate_up_proj, hidden_states, residual)
        partial = small_batch_linear(gate_up, mlp.down_proj.weight, None, "silu_and_mul")[0]  # [tokens, hidden]
        output = all_reduce(partial)  # down_proj's sum over the ranks, then its bias once
        return (output if mlp.down_proj.bias is None else output + mlp.down_proj.bias), residual


def attention(attn: LlamaAttention, qkv: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """The attention layer's forward on qkv [tokens, (q + 2 kv) * d] -> [tokens, q * d], with the q/k
    norms and RoPE inside the backend's kernel where it takes them (a decode batch on the Triton
    backend), else the layer's own forward."""
    layer = attn.attn
    q_size, kv_size = layer.local_q_heads * layer.head_dim, layer.local_kv_heads * layer.head_dim
    q, k, v = qkv.split([q_size, kv_size, kv_size], dim=-1)  # views, as the layer splits them
    q = q.view(-1, layer.local_q_heads, layer.head_dim)
    k = k.view(-1, layer.local_kv_heads, layer.head_dim)
    v = v.view(-1, layer.local_kv_heads, layer.head_dim)
    norms = getattr(attn, "q_norm", None), getattr(attn, "k_norm", None)  # Qwen3's, else absent
    qk_norm = (norms[0].weight, norms[1].weight, norms[0].eps) if norms[0] is not None else None
    ctx = get_forward_context()
    out = ctx.attn_backend.forward_rope(q, k, v, layer.layer_id, ctx.batch, positions,
                                        layer.rotary.cos_sin(qkv.device, qkv.dtype), qk_norm)
    if out is None:
        return layer.forward(qkv, positions)
    return out.reshape(-1, q_size)


def normed_linear(norm: RMSNorm, linear: LinearBase, x: torch.Tensor,
                  residual: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """linear(norm(x + residual)) in one GEMV, and x + residual (the residual stream carried on)."""
    y, summed = small_batch_linear(x, linear.weight, linear.bias, "rms_norm", norm.weight, norm.eps, residual)
    return y, x if summed is None else summed
