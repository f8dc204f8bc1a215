"""The Llama-family decoder (Llama, Qwen2, Qwen3, Mistral share it; config flags pick qkv bias and
q/k norm). Tensor parallelism lives entirely in the layers: this file reads like a plain
transformer, and each decoder layer holds exactly two all-reduces (o_proj, down_proj) (chapter 07).
Qwen3-MoE is Qwen3 whose layers may swap the dense MLP for a mixture of experts (the config says
which; minisgl/layers/moe.py, chapter 14).
"""

from __future__ import annotations

import torch

from minisgl.core import Batch
from minisgl.distributed import comm_site
from minisgl.layers import (
    AttentionLayer,
    BaseOP,
    MergedColumnParallelLinear,
    OPList,
    ParallelLMHead,
    QKVParallelLinear,
    RMSNorm,
    RotaryEmbedding,
    RowParallelLinear,
    SparseMoeBlock,
    VocabParallelEmbedding,
)

from .config import ModelConfig


class LlamaAttention(BaseOP):
    """qkv_proj (column) -> local attention -> o_proj (row, all-reduce); the decoder layer runs
    qkv_proj (with the norm before it), `forward` the rest."""

    def __init__(self, config: ModelConfig, layer_id: int, rotary: RotaryEmbedding) -> None:
        self.qkv_proj = QKVParallelLinear(
            config.hidden_size, config.head_dim, config.num_heads, config.num_kv_heads, config.qkv_bias
        )
        self.o_proj = RowParallelLinear(config.num_heads * config.head_dim, config.hidden_size, config.o_bias)
        if config.qk_norm:
            self.q_norm = RMSNorm(config.head_dim, config.rms_norm_eps)
            self.k_norm = RMSNorm(config.head_dim, config.rms_norm_eps)
        self.attn = AttentionLayer(
            layer_id,
            self.qkv_proj.local_q_heads,
            self.qkv_proj.local_kv_heads,
            config.head_dim,
            rotary,
            getattr(self, "q_norm", None),
            getattr(self, "k_norm", None),
        )

    def forward(self, positions: torch.Tensor, qkv: torch.Tensor) -> torch.Tensor:
        """qkv [tokens, (local_q + 2 * local_kv) * head_dim], the output of qkv_proj."""
        attn_out = self.attn.forward(qkv, positions)  # [tokens, local_q * head_dim]
        return self.o_proj.forward(attn_out)  # [tokens, hidden], all-reduced


class LlamaMLP(BaseOP):
    """gate_up_proj (column) -> SiLU(gate) * up -> down_proj (row, all-reduce); the decoder layer
    runs gate_up_proj (with the norm before it), `forward` the rest."""

    def __init__(self, config: ModelConfig) -> None:
        self.gate_up_proj = MergedColumnParallelLinear(config.hidden_size, [config.intermediate_size] * 2)
        self.down_proj = RowParallelLinear(config.intermediate_size, config.hidden_size)

    def forward(self, gate_up: torch.Tensor) -> torch.Tensor:
        """gate_up [tokens, 2 * intermediate / tp], the output of gate_up_proj -> [tokens, hidden]."""
        return self.down_proj.forward_silu_and_mul(gate_up)  # all-reduced

    def forward_normed(
        self, norm: RMSNorm, x: torch.Tensor, residual: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """self(norm(x + residual)), and x + residual. The norm is handed to gate_up_proj: for a decode
        batch on CUDA, norm + matmul is one kernel (chapter 10); elsewhere, two steps."""
        gate_up, residual = self.gate_up_proj.forward_rms_normed(norm, x, residual)
        return self.forward(gate_up), residual


def make_mlp(config: ModelConfig, layer_id: int) -> LlamaMLP | SparseMoeBlock:
    """The dense MLP, or for the layers a mixture-of-experts config routes, the experts."""
    if not config.is_moe_layer(layer_id):
        return LlamaMLP(config)
    return SparseMoeBlock(
        config.hidden_size, config.num_experts, config.num_experts_per_tok, config.moe_intermediate_size,
        config.norm_topk_prob, config.moe_parallel,
    )


class LlamaDecoderLayer(BaseOP):
    def __init__(self, config: ModelConfig, layer_id: int, rotary: RotaryEmbedding) -> None:
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = LlamaAttention(config, layer_id, rotary)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = make_mlp(config, layer_id)

    def forward(
        self, positions: torch.Tensor, hidden_states: torch.Tensor, residual: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # Each norm (with its residual add) is handed to the projection after it: for a decode
        # batch on CUDA, norm + matmul is one kernel (chapter 10); elsewhere, two steps.
        attn = self.self_attn
        qkv, residual = attn.qkv_proj.forward_rms_normed(self.input_layernorm, hidden_states, residual)
        hidden_states = attn.forward(positions, qkv)
        return self.mlp.forward_normed(self.post_attention_layernorm, hidden_states, residual)


class LlamaModel(BaseOP):
    def __init__(self, config: ModelConfig) -> None:
        rotary = RotaryEmbedding(
            config.head_dim, config.max_position_embeddings, config.rope_theta, config.rope_scaling
        )
        self.embed_tokens = VocabParallelEmbedding(config.vocab_size, config.hidden_size)
        self.layers = OPList([LlamaDecoderLayer(config, i, rotary) for i in range(config.num_layers)])
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        comm_site("embed_tokens")  # where the communication counter files the collectives that follow
        hidden_states = self.embed_tokens.forward(input_ids)  # [tokens, hidden], all-reduced
        residual: torch.Tensor | None = None
        for index, layer in enumerate(self.layers):
            comm_site(index)
            hidden_states, residual = layer.forward(positions, hidden_states, residual)
        hidden_states, _ = self.norm.forward_with_residual(hidden_states, residual)
        return hidden_states


class LlamaForCausalLM(BaseOP):
    """Decoder + vocab-parallel LM head; `forward(batch)` returns next-token logits per request."""

    def __init__(self, config: ModelConfig) -> None:
        self.model = LlamaModel(config)
        tied = self.model.embed_tokens if config.tie_word_embeddings else None
        self.lm_head = ParallelLMHead(config.vocab_size, config.hidden_size, tied)

    def forward(self, batch: Batch) -> torch.Tensor:
        hidden_states = self.model.forward(batch.input_ids, batch.positions)  # [tokens, hidden]
        # Only each request's last new token is sampled: a 512-token prefill needs 1 row of logits.
        comm_site("lm_head")
        return self.lm_head.forward(hidden_states[batch.last_indices])  # [num_reqs, vocab]
