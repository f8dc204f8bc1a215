"""Qwen3-MoE (chapter 14): logits equal transformers', the loader stacks each rank's experts, and
greedy tokens are the same at every tp size with the experts split by intermediate dim ("tp") or
placed whole on ranks ("ep")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from minisgl import LLM, SamplingParams
from minisgl.models.config import ModelConfig, ModelError
from minisgl.models.checkpoint import checkpoint_shapes, dummy_checkpoint, iter_checkpoint
from minisgl.models.weight import load_weights

from engine_helpers import minisgl_last_logits, transformers_last_logits

CPU = torch.device("cpu")
MOE_MODELS = ["qwen3-moe", "qwen3-moe-mixed"]
# fp32 on both sides, as for the dense models (test_models.py): fused qkv and SDPA sum in another order
LOGITS_ATOL = 1e-4


def _prompts(lengths: tuple[int, ...]) -> list[list[int]]:
    generator = torch.Generator().manual_seed(1)
    return [torch.randint(3, 1001, (n,), generator=generator).tolist() for n in lengths]


def _raw_config(model_dir: Path) -> dict:
    return json.loads((model_dir / "config.json").read_text())


@pytest.mark.parametrize("name", MOE_MODELS)
def test_last_position_logits_match_transformers(name: str, tiny_model_dir) -> None:
    model_dir = tiny_model_dir(name)
    prompts = _prompts((1, 7, 30, 65))
    torch.testing.assert_close(minisgl_last_logits(model_dir, prompts), transformers_last_logits(model_dir, prompts),
                               rtol=0, atol=LOGITS_ATOL)


def test_config_reads_the_expert_layout(tiny_model_dir) -> None:
    config = ModelConfig.from_dir(tiny_model_dir("qwen3-moe-mixed"))
    assert (config.num_experts, config.num_experts_per_tok, config.moe_intermediate_size) == (8, 2, 32)
    assert not config.norm_topk_prob and config.qk_norm
    assert [config.is_moe_layer(i) for i in range(3)] == [True, False, True]  # layer 1 is in mlp_only_layers
    raw = {**_raw_config(tiny_model_dir("qwen3-moe")), "decoder_sparse_step": 2, "num_hidden_layers": 4}
    sparse = ModelConfig.from_dict(raw)
    assert [sparse.is_moe_layer(i) for i in range(4)] == [False, True, False, True]


def test_ep_needs_experts_that_split_evenly(tiny_model_dir) -> None:
    config = ModelConfig.from_dir(tiny_model_dir("qwen3-moe"))  # 4 experts, 4 heads
    config.with_moe_parallel("ep").check_tp_size(4)
    raw = {**_raw_config(tiny_model_dir("qwen3-moe")), "num_experts": 6, "num_local_experts": 6}
    with pytest.raises(ModelError) as info:
        ModelConfig.from_dict(raw).with_moe_parallel("ep").check_tp_size(4)
    assert str(info.value) == ("tp_size=4 does not divide num_experts=6 (moe_parallel=ep); valid tp sizes: 1, 2")
    ModelConfig.from_dict(raw).with_moe_parallel("tp").check_tp_size(4)  # 96 / 4: each expert splits
    with pytest.raises(ModelError, match="needs a mixture-of-experts model"):
        ModelConfig.from_dir(tiny_model_dir("llama")).with_moe_parallel("ep")


def test_checkpoint_shapes_are_those_of_a_real_checkpoint(tiny_model_dir) -> None:
    model_dir = tiny_model_dir("qwen3-moe-mixed")
    real = {n: tuple(t.shape) for n, t in iter_checkpoint(model_dir)}
    assert dict(checkpoint_shapes(ModelConfig.from_dir(model_dir))) == real


@pytest.mark.parametrize("mode", ["tp", "ep"])
def test_stacked_experts_of_all_ranks_are_the_checkpoint(mode: str, tiny_model_dir) -> None:
    model_dir = tiny_model_dir("qwen3-moe")
    config = ModelConfig.from_dir(model_dir).with_moe_parallel(mode)
    full = dict(iter_checkpoint(model_dir))
    shards = [dict(load_weights(iter_checkpoint(model_dir), config, rank, 2, torch.float32, CPU)) for rank in range(2)]
    prefix = "model.layers.1.mlp.experts."
    for e in range(config.num_experts):
        gate, up, down = (full[f"{prefix}{e}.{proj}.weight"] for proj in ("gate_proj", "up_proj", "down_proj"))
        if mode == "ep":  # rank r holds experts 2r, 2r + 1 whole
            rank, local = divmod(e, 2)
            assert torch.equal(shards[rank][prefix + "gate_up_proj"][local], torch.cat([gate, up]))
            assert torch.equal(shards[rank][prefix + "down_proj"][local], down)
            continue
        half = config.moe_intermediate_size // 2  # every rank holds every expert: [gate rows; up rows] of its half
        for rank, shard in enumerate(shards):
            rows = slice(rank * half, (rank + 1) * half)
            assert torch.equal(shard[prefix + "gate_up_proj"][e], torch.cat([gate[rows], up[rows]]))
            assert torch.equal(shard[prefix + "down_proj"][e], down[:, rows])


def test_dummy_moe_weights_are_one_model_at_every_tp(tiny_model_dir) -> None:
    config = ModelConfig.from_dir(tiny_model_dir("qwen3-moe")).with_moe_parallel("ep")
    whole = dict(load_weights(dummy_checkpoint(config, 3, CPU), config, 0, 1, torch.float32, CPU))
    halves = [dict(load_weights(dummy_checkpoint(config, 3, CPU), config, r, 2, torch.float32, CPU)) for r in range(2)]
    name = "model.layers.0.mlp.experts.down_proj"
    assert torch.equal(torch.cat([h[name] for h in halves]), whole[name])


GREEDY = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)


def _greedy(model_dir, tp_size: int, moe_parallel: str, **engine_args) -> list[list[int]]:
    prompts = _prompts((3, 17, 40))
    with LLM(model_dir, tp_size=tp_size, dtype="float32", num_pages=512, progress=False, moe_parallel=moe_parallel,
             **engine_args) as llm:
        return [out.token_ids for out in llm.generate(prompts, GREEDY)]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("name,runs", [
    ("qwen3-moe", [(2, "tp"), (2, "ep"), (4, "ep")]),  # 4 experts at tp 4: one per rank
    ("qwen3-moe-mixed", [(2, "ep"), (4, "tp")]),
])
def test_greedy_tokens_identical_across_tp_sizes_and_splits(name: str, runs, tiny_model_dir) -> None:
    model_dir = tiny_model_dir(name)
    reference = _greedy(model_dir, 1, "tp")
    for tp, mode in runs:
        assert _greedy(model_dir, tp, mode) == reference, f"tp={tp} moe_parallel={mode} differs from tp=1"


@pytest.mark.parametrize(("args", "message"), [
    (["--tp-size", "3"], "tp_size=3 does not divide num_attention_heads=4"),
    (["--moe-parallel", "ep", "--tp-size", "3"], "tp_size=3 does not divide num_attention_heads=4"),
])
def test_cli_refuses_splits_it_cannot_run(args: list[str], message: str, tiny_model_dir) -> None:
    from minisgl.server.args import ArgsError, check_args, parse_args

    with pytest.raises((ArgsError, ModelError)) as info:
        check_args(parse_args(["--model", str(tiny_model_dir("qwen3-moe")), "--device", "cpu", *args]))
    assert message in str(info.value) and "\n" not in str(info.value)


def test_cli_refuses_ep_on_a_dense_model(tiny_model_dir) -> None:
    from minisgl.server.args import check_args, parse_args

    with pytest.raises(ModelError, match="moe_parallel='ep' needs a mixture-of-experts model; LlamaForCausalLM"):
        check_args(parse_args(["--model", str(tiny_model_dir("llama")), "--device", "cpu", "--moe-parallel", "ep"]))
