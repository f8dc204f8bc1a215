"""Public model configs the tests and quizzes compute with (numbers from the models' config.json)."""

from __future__ import annotations

LLAMA_31_8B = {
    "architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
    "vocab_size": 128256, "tie_word_embeddings": False,
}

SMOLLM2_135M = {
    "architectures": ["LlamaForCausalLM"], "hidden_size": 576, "intermediate_size": 1536,
    "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3, "head_dim": 64,
    "vocab_size": 49152, "tie_word_embeddings": True,
}

TINY_LLAMA = {  # minisgl.testing.tiny_models "llama": KV heads replicated at tp 4 and 8
    "architectures": ["LlamaForCausalLM"], "hidden_size": 128, "intermediate_size": 192,
    "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2,
    "vocab_size": 1001, "tie_word_embeddings": False,
}

QWEN3_06B = {  # head_dim 128 is set explicitly: not hidden_size / heads = 64
    "architectures": ["Qwen3ForCausalLM"], "hidden_size": 1024, "intermediate_size": 3072,
    "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
    "vocab_size": 151936, "tie_word_embeddings": True,
}
