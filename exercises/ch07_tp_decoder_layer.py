"""Chapter 07 (the TP decoder layer): the MLP as column -> local activation -> row, and the local
sizes of every projection in one decoder layer.

A Llama MLP is down(silu(gate(x)) * up(x)). gate_proj and up_proj ([intermediate, hidden] each) are
column parallel and fused into one gate_up_proj whose local weight is [gate shard; up shard]
([2 * intermediate / tp, hidden]); SiLU-and-multiply needs no communication because each rank holds
matching gate and up columns; down_proj ([hidden, intermediate]) is row parallel and ends with the
layer's second all-reduce (the first follows o_proj).
"""

from __future__ import annotations

from typing import Any

import torch


def tp_mlp_forward(x: torch.Tensor, gate: torch.Tensor, up: torch.Tensor, down: torch.Tensor) -> torch.Tensor:
    """Task 07-tp-decoder-layer/tp-mlp: the tensor-parallel MLP, complete on every rank.

    x:    [tokens, hidden], the same on every rank
    gate: [intermediate, hidden], up: [intermediate, hidden], down: [hidden, intermediate]: full
          checkpoint weights, the same dtype as x; shard them for this rank (get_tp_info()), fuse
          gate/up, run
    returns [tokens, hidden] = down(silu(gate(x)) * up(x)) on every rank

    Contract:
    - exactly one `minisgl.distributed.all_reduce` and no other collective;
    - the result has x's dtype and device; x and the weights are left unchanged;
    - raise ValueError naming intermediate_size when tp does not divide it.

    May use: torch; minisgl.distributed.get_tp_info and all_reduce; minisgl.layers.silu_and_mul.
    Not the engine's linear layers or LlamaMLP (they are this task).
    """
    raise NotImplementedError("07-tp-decoder-layer/tp-mlp")


def local_shapes(hf_config: dict[str, Any], tp_size: int, dtype_bytes: int = 2) -> dict[str, int]:
    """Task 07-tp-decoder-layer/local-shapes: one rank's share of a decoder layer and its KV cache.

    hf_config: a Hugging Face config.json as a dict: hidden_size, intermediate_size,
               num_hidden_layers, num_attention_heads, vocab_size (required); num_key_value_heads
               (absent: as many as attention heads); head_dim (absent: hidden_size /
               num_attention_heads; present, it need not equal that)
    returns {
      "local_q_heads":  query heads on one rank,
      "local_kv_heads": KV heads on one rank (at least 1: replicated when there are fewer than tp),
      "qkv_out":        output features of the rank's qkv_proj = (q + 2 * kv local heads) * head_dim,
      "o_proj_in":      input features of the rank's o_proj,
      "gate_up_out":    output features of the rank's gate_up_proj,
      "down_in":        input features of the rank's down_proj,
      "vocab_shard":    rows of the rank's embedding shard, ceil(vocab / tp),
      "kv_bytes_per_token": bytes of K and V one token takes in this rank's cache, all layers,
                        `dtype_bytes` per element,
    }

    Contract: raise ValueError
    - naming the valid tp sizes (e.g. "1, 3" for SmolLM2) when tp_size does not split the query
      heads or the MLP evenly, or neither divides nor is a multiple of the KV heads (the valid
      sizes are the tp in 1 .. num_attention_heads for which all three hold);
    - naming the key when a required key is missing.

    May use: plain Python. Nothing of minisgl (its layers' constructors and config checks compute
    exactly these numbers).
    """
    raise NotImplementedError("07-tp-decoder-layer/local-shapes")
