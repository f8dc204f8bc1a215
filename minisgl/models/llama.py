"""The Llama-family decoder (chapter 07): Llama, Qwen2, Qwen3 and Mistral share it (config flags pick
qkv bias and q/k norm), and Qwen3-MoE swaps some layers' MLP for experts (chapter 14). Tensor
parallelism lives in the layers: this file reads like a plain transformer, with two all-reduces per
decoder layer (o_proj, down_proj). A pipeline stage (chapter 13) builds only its own layers (the
others are `MissingLayer`s), and `forward` takes and returns the activations between stages.
"""

from __future__ import annotations

import torch

from minisgl.core import Batch
from minisgl.distributed import comm_site
from minisgl.layers import (AttentionLayer, BaseOP, MergedColumnParallelLinear, OPList, ParallelLMHead,
                            QKVParallelLinear, RMSNorm, RotaryEmbedding, RowParallelLinear, SparseMoeBlock,
                            VocabParallelEmbedding, silu_and_mul)

from .config import ModelConfig
from .stage import MissingLayer, PipelineStage, whole_model

StageTensors = tuple[torch.Tensor, torch.Tensor]  # (hidden states, residual), each [tokens, hidden]


class LlamaAttention(BaseOP):
    """qkv_proj (column) -> local attention -> o_proj (row, all-reduce)."""

    def __init__(self, config: ModelConfig, kv_layer: int, rotary: RotaryEmbedding) -> None:
        self.qkv_proj = QKVParallelLinear(config.hidden_size, config.head_dim, config.num_heads, config.num_kv_heads,
                                          config.qkv_bias)
        self.o_proj = RowParallelLinear(config.num_heads * config.head_dim, config.hidden_size, config.o_bias)
        if config.qk_norm:
            self.q_norm = RMSNorm(config.head_dim, config.rms_norm_eps)
            self.k_norm = RMSNorm(config.head_dim, config.rms_norm_eps)
        self.attn = AttentionLayer(kv_layer, self.qkv_proj.local_q_heads, self.qkv_proj.local_kv_heads, config.head_dim,
                                   rotary, getattr(self, "q_norm", None), getattr(self, "k_norm", None))

    def forward(self, positions: torch.Tensor, hidden_states: torch.Tensor) -> torch.Tensor:
        qkv = self.qkv_proj.forward(hidden_states)  # [tokens, (local_q + 2 * local_kv) * head_dim]
        attn_out = self.attn.forward(qkv, positions)  # [tokens, local_q * head_dim]
        return self.o_proj.forward(attn_out)  # [tokens, hidden], all-reduced


class LlamaMLP(BaseOP):
    """gate_up_proj (column) -> SiLU(gate) * up -> down_proj (row, all-reduce)."""

    def __init__(self, config: ModelConfig) -> None:
        self.gate_up_proj = MergedColumnParallelLinear(config.hidden_size, [config.intermediate_size] * 2)
        self.down_proj = RowParallelLinear(config.intermediate_size, config.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate_up = self.gate_up_proj.forward(x)  # [tokens, 2 * intermediate / tp]
        return self.down_proj.forward(silu_and_mul(gate_up))  # [tokens, hidden], all-reduced


def make_mlp(config: ModelConfig, layer_id: int) -> LlamaMLP | SparseMoeBlock:
    """The dense MLP, or for the layers a mixture-of-experts config routes, the experts."""
    if not config.is_moe_layer(layer_id):
        return LlamaMLP(config)
    return SparseMoeBlock(config.hidden_size, config.num_experts, config.num_experts_per_tok,
                          config.moe_intermediate_size, config.norm_topk_prob, config.moe_parallel)


class LlamaDecoderLayer(BaseOP):
    def __init__(self, config: ModelConfig, layer_id: int, kv_layer: int, rotary: RotaryEmbedding) -> None:
        """`layer_id`: the layer's index in the model (which says whether its MLP is a mixture of experts);
        `kv_layer`: its index in this rank's KV pool (the same without pipeline parallelism)."""
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = LlamaAttention(config, kv_layer, rotary)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = make_mlp(config, layer_id)

    def forward(self, positions: torch.Tensor, hidden_states: torch.Tensor,
                residual: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """hidden_states [tokens, hidden] and the residual stream so far (None before the first layer)
        -> this layer's output and the residual stream, which the next layer's norm adds."""
        hidden_states, residual = self.input_layernorm.forward_with_residual(hidden_states, residual)
        hidden_states = self.self_attn.forward(positions, hidden_states)
        hidden_states, residual = self.post_attention_layernorm.forward_with_residual(hidden_states, residual)
        return self.mlp.forward(hidden_states), residual


class LlamaModel(BaseOP):
    def __init__(self, config: ModelConfig, stage: PipelineStage) -> None:
        rotary = RotaryEmbedding(config.head_dim, config.max_position_embeddings, config.rope_theta,
                                 config.rope_scaling)
        self._stage = stage
        self.embed_tokens = (VocabParallelEmbedding(config.vocab_size, config.hidden_size)
                             if stage.holds_embedding else MissingLayer())
        self.layers = OPList([
            LlamaDecoderLayer(config, i, stage.kv_layer(i), rotary) if i in stage.layers else MissingLayer()
            for i in range(config.num_layers)
        ])
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps) if stage.is_last else MissingLayer()

    def forward(self, positions: torch.Tensor, hidden_states: torch.Tensor,
                residual: torch.Tensor | None) -> StageTensors:
        """This stage's decoder layers: [tokens, hidden] in, (hidden states, residual) out."""
        for index in self._stage.layers:
            comm_site(index)  # where the communication counter files the collectives that follow
            hidden_states, residual = self.layers[index].forward(positions, hidden_states, residual)
        assert residual is not None  # every stage holds at least one layer (split_layers)
        return hidden_states, residual


class LlamaForCausalLM(BaseOP):
    """Decoder + vocab-parallel LM head; `forward(batch)` returns next-token logits per request
    (on a stage before the last, the hidden states and residual for the next stage)."""

    def __init__(self, config: ModelConfig, stage: PipelineStage | None = None) -> None:
        self._stage = stage or whole_model(config.num_layers, config.tie_word_embeddings)
        self.model = LlamaModel(config, self._stage)
        if self._stage.is_last:
            tied = self.model.embed_tokens if config.tie_word_embeddings else None
            self.lm_head = ParallelLMHead(config.vocab_size, config.hidden_size, tied)

    def forward(self, batch: Batch, carried: StageTensors | None = None) -> torch.Tensor | StageTensors:
        """`carried`: what the previous stage returned (None on the first stage, which embeds)."""
        if carried is None:
            comm_site("embed_tokens")
            hidden_states, residual = self.model.embed_tokens.forward(batch.input_ids), None  # all-reduced
        else:
            hidden_states, residual = carried
        hidden_states, residual = self.model.forward(batch.positions, hidden_states, residual)  # [tokens, hidden]
        if not self._stage.is_last:
            return hidden_states, residual
        hidden_states, _ = self.model.norm.forward_with_residual(hidden_states, residual)
        if batch.phase != "decode":  # only each request's last new token is sampled (decode rows already are)
            hidden_states = hidden_states[batch.last_indices]  # [num_reqs, hidden]
        comm_site("lm_head")
        return self.lm_head.forward(hidden_states)  # [num_reqs, vocab]
