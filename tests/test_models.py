"""Every supported architecture matches transformers, and greedy tokens do not depend on tp size
(SmolLM2 at tp 3 against tp 1: through the server, in test_server_smollm2.py)."""

from __future__ import annotations

import pytest
import torch

from minisgl import LLM, SamplingParams
from minisgl.testing.tiny_models import TINY_MODEL_SPECS

from engine_helpers import minisgl_last_logits, transformers_last_logits

ARCHITECTURES = ["llama", "llama-tied", "qwen2", "qwen3", "mistral"]
# fp32 on both sides; kernels differ in summation order (fused qkv, SDPA), so not bit-exact.
LOGITS_ATOL = 1e-4


def _prompts(vocab: int, lengths: tuple[int, ...] = (1, 7, 30, 65)) -> list[list[int]]:
    generator = torch.Generator().manual_seed(1)
    return [torch.randint(3, vocab, (n,), generator=generator).tolist() for n in lengths]


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_last_position_logits_match_transformers(name: str, tiny_model_dir) -> None:
    model_dir = tiny_model_dir(name)
    prompts = _prompts(TINY_MODEL_SPECS[name].config.vocab_size)
    ours = minisgl_last_logits(model_dir, prompts)
    theirs = transformers_last_logits(model_dir, prompts)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=LOGITS_ATOL)


def test_smollm2_logits_match_transformers(default_model_dir) -> None:
    prompts = [[1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173], list(range(100, 160))]
    ours = minisgl_last_logits(default_model_dir, prompts)
    theirs = transformers_last_logits(default_model_dir, prompts)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=2e-4)


@pytest.mark.parametrize("name", ["llama", "qwen3"])
def test_bf16_logits_round_like_transformers_bf16(name: str, tiny_model_dir) -> None:
    # Same rounding order as Hugging Face (norm in fp32, scale in bf16), so bf16 answers agree with
    # theirs rather than drifting one rounding apart per layer.
    model_dir = tiny_model_dir(name)
    prompts = _prompts(TINY_MODEL_SPECS[name].config.vocab_size, (5, 33))
    ours = minisgl_last_logits(model_dir, prompts, "bfloat16").float()
    theirs = transformers_last_logits(model_dir, prompts, "bfloat16").float()
    # 0.0625 is one bf16 ulp for logits in [8, 16); a norm that rounds once less is off by 0.08-0.2
    torch.testing.assert_close(ours, theirs, rtol=0, atol=0.07)
    assert (ours.argmax(-1) == theirs.argmax(-1)).all()


def test_smollm2_answers_paris_in_bf16_too(default_model_dir) -> None:
    with LLM(default_model_dir, dtype="bfloat16", num_pages=512, progress=False) as llm:
        (answer,) = llm.chat([{"role": "user", "content": "What is the capital of France?"}],
                             SamplingParams(temperature=0, max_tokens=12))
    assert "Paris" in answer.text


GREEDY = SamplingParams(temperature=0, max_tokens=32, ignore_eos=True)


def _greedy_tokens(model_dir, prompts, tp_size: int) -> list[list[int]]:
    with LLM(model_dir, tp_size=tp_size, dtype="float32", num_pages=4096, progress=False) as llm:
        return [out.token_ids for out in llm.generate(prompts, GREEDY)]


# (model, tp sizes): covers tp 2, 3, 4, 8, KV replication (llama at 4 and 8, qwen3 at 2 and 3),
# vocab padding (1001 and 997 divide by no tp) and tied embeddings (llama-tied, qwen3).
TP_CASES = [("llama", (2, 4, 8)), ("llama-tied", (3,)), ("qwen2", (2,)), ("qwen3", (3,)), ("mistral", (4,))]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("name,tp_sizes", TP_CASES)
def test_greedy_tokens_identical_at_every_tp_size(name: str, tp_sizes: tuple[int, ...], tiny_model_dir) -> None:
    model_dir = tiny_model_dir(name)
    prompts = _prompts(TINY_MODEL_SPECS[name].config.vocab_size, (3, 17, 40))
    reference = _greedy_tokens(model_dir, prompts, 1)
    assert all(len(tokens) == 32 for tokens in reference)
    for tp in tp_sizes:
        assert _greedy_tokens(model_dir, prompts, tp) == reference, f"tp={tp} differs from tp=1"


def test_one_forward_crosses_the_seam_2_layers_plus_1_times(tiny_model_dir) -> None:
    from minisgl.distributed import collective_counts, reset_collective_counts

    model_dir = tiny_model_dir("llama")
    reset_collective_counts()
    minisgl_last_logits(model_dir, [[5, 6, 7], [8, 9]])
    layers = TINY_MODEL_SPECS["llama"].config.num_hidden_layers
    assert collective_counts() == {"all_reduce": 2 * layers + 1, "all_gather": 1}
