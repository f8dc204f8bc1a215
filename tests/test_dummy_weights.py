"""Dummy weights (`load_format="dummy"`) are one model, whatever the tp size: each full tensor is
drawn from its own seed, then sharded like a checkpoint tensor."""

from __future__ import annotations

import pytest
import torch

from minisgl import LLM, SamplingParams
from minisgl.models.config import ModelConfig
from minisgl.models.checkpoint import checkpoint_shapes, dummy_checkpoint, iter_checkpoint
from minisgl.models.weight import load_weights

CPU = torch.device("cpu")


@pytest.mark.parametrize("name", ["llama", "llama-tied", "qwen2", "qwen3", "mistral"])
def test_checkpoint_shapes_are_those_of_a_real_checkpoint(name: str, tiny_model_dir) -> None:
    model_dir = tiny_model_dir(name)
    real = {n: tuple(t.shape) for n, t in iter_checkpoint(model_dir) if "rotary_emb" not in n}
    if ModelConfig.from_dir(model_dir).tie_word_embeddings:
        real.pop("lm_head.weight", None)  # some writers store the tied head, the loader skips it
    assert dict(checkpoint_shapes(ModelConfig.from_dir(model_dir))) == real


def test_each_tensor_is_drawn_from_its_own_seed(tiny_model_dir) -> None:
    config = ModelConfig.from_dir(tiny_model_dir("llama"))
    first = dict(dummy_checkpoint(config, seed=0, device=CPU))
    again = dict(dummy_checkpoint(config, seed=0, device=CPU))
    other = dict(dummy_checkpoint(config, seed=1, device=CPU))
    name = "model.layers.1.mlp.down_proj.weight"
    assert torch.equal(first[name], again[name]) and not torch.equal(first[name], other[name])
    assert not torch.equal(first["model.layers.0.mlp.gate_proj.weight"], first["model.layers.0.mlp.up_proj.weight"])


def test_tp_2_shards_put_together_are_the_tp_1_weights(tiny_model_dir) -> None:
    config = ModelConfig.from_dir(tiny_model_dir("llama"))
    full = dict(load_weights(dummy_checkpoint(config, 3, CPU), config, 0, 1, torch.float32, CPU))
    shards = [dict(load_weights(dummy_checkpoint(config, 3, CPU), config, rank, 2, torch.float32, CPU))
              for rank in range(2)]
    down = "model.layers.0.mlp.down_proj.weight"  # row parallel: split along the inputs
    assert torch.equal(torch.cat([s[down] for s in shards], dim=1), full[down])
    q_rows = config.num_heads * config.head_dim // 2  # qkv_proj rows of one rank start with its q heads
    qkv = "model.layers.1.self_attn.qkv_proj.weight"
    assert torch.equal(torch.cat([s[qkv][:q_rows] for s in shards]), full[qkv][: 2 * q_rows])


@pytest.mark.timeout(300)
def test_dummy_greedy_tokens_are_the_same_at_tp_1_and_2(tiny_model_dir) -> None:
    prompts = [[5, 17, 99, 3], list(range(40, 71))]
    params = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
    tokens = {}
    for tp in (1, 2):
        with LLM(tiny_model_dir("llama"), tp_size=tp, dtype="float32", load_format="dummy", num_pages=256,
                 progress=False) as llm:
            tokens[tp] = [out.token_ids for out in llm.generate(prompts, params)]
    assert tokens[2] == tokens[1]
