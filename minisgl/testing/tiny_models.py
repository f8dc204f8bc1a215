"""Tiny random-weight checkpoints (Llama, Qwen2, Qwen3, Mistral, Qwen3-MoE) with real tokenizers,
built deterministically in a few milliseconds for the engine tests and the course exercises
(chapter 00; the mixture-of-experts ones, chapter 14).

Run `python -m minisgl.testing.tiny_models` to build them all and print what each one covers.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    AutoModelForCausalLM,
    LlamaConfig,
    MistralConfig,
    PretrainedConfig,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen3Config,
    Qwen3MoeConfig,
)

from minisgl.models.default_model import building_checkpoint, is_complete_checkpoint
from minisgl.utils import minisgl_cache_dir

# Large enough that logits differ clearly between tokens, so greedy output depends on the prompt.
WEIGHT_STD = 0.2
# Norm weights scatter around 1 instead of sitting at exactly 1, so a forgotten norm load is caught.
NORM_WEIGHT_STD = 0.1

ENDOFTEXT, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = [ENDOFTEXT, IM_START, IM_END]  # ids 0, 1, 2, as in SmolLM2
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
# Text the tokenizers are trained on: some English for word-like tokens, and the numbers below
# 1000, whose digit groups supply enough merges to fill any vocabulary here.
TRAINING_TEXT = [
    "An inference engine turns a trained language model into a service.",
    "It splits each prompt into tokens, runs the model over the whole batch,",
    "and streams new text back while the next step is being scheduled.",
    "The key value cache keeps the attention keys and values of every token seen so far,",
    "so a decode step computes only one new position per request.",
    "A scheduler decides which requests join the next batch without exceeding memory.",
    "Tensor parallelism splits every large matrix across devices and sums partial results.",
    "Sampling picks the next token from the logits, greedily or with a temperature.",
    "What is the capital of France? Paris is the capital of France. Hello, world!",
] + [" ".join(str(n) for n in range(start, start + 10)) for start in range(0, 1000, 10)]

COMMON_CONFIG = dict(
    num_hidden_layers=2,
    max_position_embeddings=512,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=0,
)


@dataclass(frozen=True)
class TinyModelSpec:
    """A model architecture plus the tensor-parallel sizes its head counts are chosen for."""

    config: PretrainedConfig
    tp_sizes: tuple[int, ...]


TINY_MODEL_SPECS: dict[str, TinyModelSpec] = {
    # tp 1, 2, 4, 8. 2 KV heads: replicated across ranks at tp 4 and 8. 1001 = 7*11*13: never divides.
    "llama": TinyModelSpec(
        LlamaConfig(
            hidden_size=128, intermediate_size=192, num_attention_heads=8, num_key_value_heads=2,
            vocab_size=1001, tie_word_embeddings=False, **COMMON_CONFIG,
        ),
        tp_sizes=(1, 2, 4, 8),
    ),
    # tp 1, 3. The only spec for tp 3: 6 heads, 3 KV heads, prime vocab 997, tied LM head.
    "llama-tied": TinyModelSpec(
        LlamaConfig(
            hidden_size=96, intermediate_size=192, num_attention_heads=6, num_key_value_heads=3,
            vocab_size=997, tie_word_embeddings=True, **COMMON_CONFIG,
        ),
        tp_sizes=(1, 3),
    ),
    # tp 1, 2, 4. Biases on q/k/v (Qwen2 always has them); vocab 1024 divides evenly.
    "qwen2": TinyModelSpec(
        Qwen2Config(
            hidden_size=64, intermediate_size=192, num_attention_heads=4, num_key_value_heads=2,
            vocab_size=1024, tie_word_embeddings=False, **COMMON_CONFIG,
        ),
        tp_sizes=(1, 2, 4),
    ),
    # tp 1, 2, 3. RMSNorm on q and k per head; head_dim 32 set explicitly (6 * 32 != hidden 64);
    # a single KV head, replicated at every tp > 1; tied LM head.
    "qwen3": TinyModelSpec(
        Qwen3Config(
            hidden_size=64, intermediate_size=192, num_attention_heads=6, num_key_value_heads=1,
            head_dim=32, vocab_size=1001, tie_word_embeddings=True, **COMMON_CONFIG,
        ),
        tp_sizes=(1, 2, 3),
    ),
    # tp 1, 2, 4, 8. Llama-shaped; sliding_window=None gives plain full attention. 4 KV heads:
    # replicated at tp 8.
    "mistral": TinyModelSpec(
        MistralConfig(
            hidden_size=128, intermediate_size=192, num_attention_heads=8, num_key_value_heads=4,
            sliding_window=None, vocab_size=1001, tie_word_embeddings=False, **COMMON_CONFIG,
        ),
        tp_sizes=(1, 2, 4, 8),
    ),
    # tp 1, 2, 4, experts split either way (chapter 14): 4 experts, 2 routed per token, renormalised.
    "qwen3-moe": TinyModelSpec(
        Qwen3MoeConfig(
            hidden_size=64, intermediate_size=192, moe_intermediate_size=96, num_experts=4,
            num_experts_per_tok=2, norm_topk_prob=True, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, vocab_size=1001, tie_word_embeddings=False,
            **COMMON_CONFIG,
        ),
        tp_sizes=(1, 2, 4),
    ),
    # tp 1, 2, 4. Dense and expert layers mixed (layer 1 is in mlp_only_layers: MoE, dense, MoE);
    # 8 experts, 2 routed per token, weights not renormalised over the 2.
    "qwen3-moe-mixed": TinyModelSpec(
        Qwen3MoeConfig(
            hidden_size=64, intermediate_size=128, moe_intermediate_size=32, num_experts=8,
            num_experts_per_tok=2, norm_topk_prob=False, mlp_only_layers=[1], num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, vocab_size=1001, tie_word_embeddings=False,
            **{**COMMON_CONFIG, "num_hidden_layers": 3},
        ),
        tp_sizes=(1, 2, 4),
    ),
}


def default_tiny_model_dir(name: str, seed: int = 0) -> Path:
    """Default location of a tiny checkpoint: `$MINISGL_CACHE_DIR/tiny/<name>-seed<seed>`."""
    return minisgl_cache_dir() / "tiny" / f"{name}-seed{seed}"


def make_tiny_model(name: str, out_dir: Path | None = None, seed: int = 0) -> Path:
    """Build (or reuse) the tiny checkpoint `name`; the same name and seed give identical bytes."""
    if name not in TINY_MODEL_SPECS:
        raise ValueError(f"unknown tiny model {name!r}; choose one of {sorted(TINY_MODEL_SPECS)}")
    target = Path(out_dir) if out_dir is not None else default_tiny_model_dir(name, seed)
    if is_complete_checkpoint(target):
        return target
    config = TINY_MODEL_SPECS[name].config
    with building_checkpoint(target) as scratch:
        build_random_model(config, seed).save_pretrained(scratch)
        build_tokenizer(config.vocab_size).save_pretrained(scratch, save_jinja_files=False)
    return target


def build_random_model(config: PretrainedConfig, seed: int) -> torch.nn.Module:
    """An fp32 model of `config` whose every parameter is drawn from a generator seeded by `seed`."""
    model = AutoModelForCausalLM.from_config(copy.deepcopy(config), dtype=torch.float32)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        # named_parameters lists a tied LM head once (under the embedding), in a fixed order.
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=generator)
            if name.endswith("norm.weight"):
                param.copy_(1.0 + NORM_WEIGHT_STD * noise)
            else:
                param.copy_(WEIGHT_STD * noise)
    return model.eval()


def build_tokenizer(vocab_size: int) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer with exactly `vocab_size` tokens, trained on TRAINING_TEXT.

    Byte-level means any string can be encoded (unknown characters fall back to their UTF-8
    bytes), and exactly `vocab_size` means every id the model can emit decodes to text.
    """
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(TRAINING_TEXT, trainer=trainer)
    if tokenizer.get_vocab_size() != vocab_size:
        raise ValueError(
            f"TRAINING_TEXT yields only {tokenizer.get_vocab_size()} tokens, not {vocab_size}; "
            "add text to it or pick a smaller vocab_size"
        )
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=IM_START,
        eos_token=IM_END,
        pad_token=ENDOFTEXT,
        chat_template=CHAT_TEMPLATE,
    )


def head_dim(config: PretrainedConfig) -> int:
    """Per-head width: explicit where the config sets it (Qwen3), else hidden_size / heads."""
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def describe_tiny_models() -> str:
    """One table row per spec: what each tiny model exercises."""
    header = ("name", "arch", "layers", "heads", "kv heads", "head_dim", "vocab", "tied", "tp sizes")
    rows = [header]
    for name, spec in TINY_MODEL_SPECS.items():
        c = spec.config
        rows.append((
            name,
            c.model_type,
            str(c.num_hidden_layers),
            str(c.num_attention_heads),
            str(c.num_key_value_heads),
            str(head_dim(c)),
            str(c.vocab_size),
            "yes" if c.tie_word_embeddings else "no",
            ",".join(map(str, spec.tp_sizes)),
        ))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) for row in rows)


def main() -> None:
    for name in TINY_MODEL_SPECS:
        print(f"{name}: {make_tiny_model(name)}")
    print()
    print(describe_tiny_models())


if __name__ == "__main__":
    main()
