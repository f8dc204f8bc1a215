"""Bad input fails fast with one line that says what is wrong and what to do."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys

import pytest
import torch

from minisgl import LLM, SamplingParams
from minisgl.attention.base import resolve_attention_backend
from minisgl.config import ArgsError
from minisgl.models.config import ModelError
from minisgl.process import LaunchError


def _one_line(error: BaseException) -> str:
    message = str(error)
    assert "\n" not in message, message
    return message


def test_missing_model_dir(tmp_path) -> None:
    with pytest.raises(ModelError) as info:
        LLM(tmp_path / "nowhere")
    assert "does not exist" in _one_line(info.value)


def test_unsupported_architecture(tmp_path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"]}))
    with pytest.raises(ModelError) as info:
        LLM(tmp_path)
    assert "'GPT2LMHeadModel' is not supported; supported: LlamaForCausalLM" in _one_line(info.value)


def test_tp_size_that_does_not_divide_the_heads_lists_valid_sizes(default_model_dir) -> None:
    with pytest.raises(ModelError) as info:
        LLM(default_model_dir, tp_size=2)
    assert _one_line(info.value) == "tp_size=2 does not divide num_attention_heads=9; valid tp sizes: 1, 3"


def test_tp_larger_than_the_machine_can_spawn(tmp_path, tiny_model_dir) -> None:
    config = json.loads((tiny_model_dir("llama") / "config.json").read_text())
    config.update(num_attention_heads=64, num_key_value_heads=64, head_dim=2, intermediate_size=128)
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ArgsError) as info:
        LLM(tmp_path, tp_size=64)
    assert "tp_size=64 needs 64 processes" in _one_line(info.value)


def test_prompt_longer_than_the_context(tiny_model_dir) -> None:
    with LLM(tiny_model_dir("llama"), dtype="float32", num_pages=256, progress=False) as llm:
        with pytest.raises(ValueError) as info:
            llm.generate([[5] * 600], SamplingParams(max_tokens=4))
        assert "600 tokens; this model's context is 512 tokens" in _one_line(info.value)
        # the engine is still usable afterwards
        assert len(llm.generate([[5, 6]], SamplingParams(temperature=0, max_tokens=3))[0].token_ids) >= 1


@pytest.mark.timeout(120)
def test_a_rank_that_fails_at_start_is_named_and_the_rest_stop(tmp_path, tiny_model_dir) -> None:
    shutil.copy(tiny_model_dir("llama") / "config.json", tmp_path / "config.json")  # no weights
    with pytest.raises(LaunchError) as info:
        LLM(tmp_path, tp_size=2, dtype="float32")
    assert "failed to start: ModelError:" in _one_line(info.value)
    assert "has no *.safetensors weights" in str(info.value)


def test_bad_sampling_params_are_rejected() -> None:
    with pytest.raises(ValueError, match=r"max_tokens must be an integer in \[1, 2147483647\], got -1"):
        SamplingParams(max_tokens=-1)
    with pytest.raises(ValueError, match="top_p must be in"):
        SamplingParams(top_p=0)


@pytest.mark.timeout(120)
def test_a_script_read_from_stdin_cannot_spawn_ranks(tiny_model_dir) -> None:
    script = f"from minisgl import LLM\nLLM({str(tiny_model_dir('llama'))!r}, tp_size=2, dtype='float32')\n"
    result = subprocess.run([sys.executable, "-"], input=script, capture_output=True, text=True, timeout=110)
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert "LaunchError: child processes are spawned" in last  # one line, not a child's traceback
    assert "<stdin>" in last and "save it to a file" in last


def test_flashinfer_backend_on_a_cpu_is_a_one_line_error() -> None:
    # the same answer whether or not flashinfer-python is installed
    with pytest.raises(ValueError) as info:
        resolve_attention_backend("flashinfer", torch.device("cpu"))
    assert _one_line(info.value) == "attention backend 'flashinfer' runs on CUDA only; on a CPU use 'torch'"


def test_flashinfer_backend_without_the_package_names_the_install(monkeypatch) -> None:
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args: None if name == "flashinfer" else real_find_spec(name, *args))
    with pytest.raises(ValueError) as info:  # torch.device("cuda") needs no GPU: nothing runs there
        resolve_attention_backend("flashinfer", torch.device("cuda"))
    assert "needs the flashinfer-python package: pip install flashinfer-python==0.6." in _one_line(info.value)


def test_auto_never_picks_flashinfer(monkeypatch) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *args: object())  # everything "installed"
    assert resolve_attention_backend("auto", torch.device("cuda")) == "triton"
