"""Config-only model directories of real model shapes (no weights, no tokenizer), for benchmarks
and GPU tests with `load_format="dummy"`, and random-weight checkpoints of those shapes for
comparisons with transformers.

    python -m minisgl.testing.shapes OUT_DIR     # writes OUT_DIR/<shape> for every shape below
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

SHAPES: dict[str, dict[str, Any]] = {
    # SmolLM2-135M(-Instruct): a Llama with 9 heads, 3 KV heads, tied embeddings
    "smollm2-135m": {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
        "num_attention_heads": 9, "num_key_value_heads": 3, "head_dim": 64,
        "vocab_size": 49152, "tie_word_embeddings": True, "rms_norm_eps": 1e-5,
        "rope_theta": 100000.0, "max_position_embeddings": 8192,
        "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
    },
    # Qwen3-0.6B: q/k norm, head_dim 128 (16 * 128 != hidden 1024), tied embeddings
    "qwen3-0.6b": {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
        "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28,
        "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
        "vocab_size": 151936, "tie_word_embeddings": True, "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0, "max_position_embeddings": 40960,
        "bos_token_id": 151643, "eos_token_id": 151645, "hidden_act": "silu",
    },
    # GPT-2 small's width and depth as a Llama with 4 KV heads: splits at tp 1, 2, 4, and a CPU
    # decodes it in tens of milliseconds (chapter 12's CPU measurements)
    "llama-125m": {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": 768, "intermediate_size": 2048, "num_hidden_layers": 12,
        "num_attention_heads": 12, "num_key_value_heads": 4, "head_dim": 64,
        "vocab_size": 32000, "tie_word_embeddings": False, "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0, "max_position_embeddings": 4096,
        "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
    },
    # Llama-3.1-8B's public config.json (chapters 07-09): 32 layers, 8 KV heads, vocab 128256
    "llama-3.1-8b": {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
        "vocab_size": 128256, "tie_word_embeddings": False, "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0, "max_position_embeddings": 131072,
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192},
        "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "hidden_act": "silu",
    },
    # Qwen3-30B-A3B's public config.json: 48 layers, every one 128 experts with 8 routed per token
    # (3.3B of the 30.5B parameters active per token); chapter 14's GPU benchmark
    "qwen3-30b-a3b": {
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
        "hidden_size": 2048, "intermediate_size": 6144, "moe_intermediate_size": 768, "num_hidden_layers": 48,
        "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
        "num_experts": 128, "num_experts_per_tok": 8, "norm_topk_prob": True,
        "decoder_sparse_step": 1, "mlp_only_layers": [],
        "vocab_size": 151936, "tie_word_embeddings": False, "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0, "max_position_embeddings": 40960,
        "bos_token_id": 151643, "eos_token_id": 151645, "hidden_act": "silu",
    },
    # Qwen3-MoE routing scaled down (16 experts, 4 routed per token) at a width a CPU decodes
    # in milliseconds: chapter 14's CPU measurements of TP against EP
    "qwen3-moe-small": {
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
        "hidden_size": 512, "intermediate_size": 1536, "moe_intermediate_size": 256, "num_hidden_layers": 8,
        "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 64,
        "num_experts": 16, "num_experts_per_tok": 4, "norm_topk_prob": True,
        "decoder_sparse_step": 1, "mlp_only_layers": [],
        "vocab_size": 32000, "tie_word_embeddings": False, "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0, "max_position_embeddings": 4096,
        "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
    },
}


def make_shape_dir(name: str, out_dir: Path, num_layers: int | None = None) -> Path:
    """Write `out_dir/config.json` for shape `name` (with `num_layers` layers instead of the shape's,
    if given); load it with load_format="dummy"."""
    if name not in SHAPES:
        raise ValueError(f"unknown shape {name!r}; choose one of {sorted(SHAPES)}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    config = {**SHAPES[name], **({"num_hidden_layers": num_layers} if num_layers else {})}
    (out_dir / "config.json").write_text(json.dumps(config, indent=2))
    return out_dir


def make_random_checkpoint(name: str, out_dir: Path, seed: int = 0) -> Path:
    """A full safetensors checkpoint of shape `name` with random weights (transformers builds and
    saves it; minisgl and transformers then load the very same tensors)."""
    from transformers import AutoConfig

    from .tiny_models import build_random_model

    make_shape_dir(name, out_dir)
    config = AutoConfig.from_pretrained(out_dir)
    build_random_model(config, seed).save_pretrained(out_dir)
    return Path(out_dir)


def parameter_bytes(name: str, bytes_per_param: int = 2) -> int:
    """Bytes of the weights one decode step reads (a tied LM head is read twice: as the embedding
    row gather, negligible, and as the LM head matrix, counted once)."""
    c = SHAPES[name]
    hidden, inter, heads, kv, d = (c["hidden_size"], c["intermediate_size"], c["num_attention_heads"],
                                   c["num_key_value_heads"], c["head_dim"])
    per_layer = hidden * (heads + 2 * kv) * d + heads * d * hidden + 3 * hidden * inter + 2 * hidden
    vocab = c["vocab_size"] * hidden * (1 if c["tie_word_embeddings"] else 2)
    return bytes_per_param * (c["num_hidden_layers"] * per_layer + vocab + hidden)


def kv_bytes_per_token(name: str, bytes_per_value: int = 2) -> int:
    c = SHAPES[name]
    return 2 * c["num_hidden_layers"] * c["num_key_value_heads"] * c["head_dim"] * bytes_per_value


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    for name in SHAPES:
        print(make_shape_dir(name, root / name))


if __name__ == "__main__":
    main()
