"""Pipeline parallelism (chapter 13): the stage split of the layers, and pipelines that answer
exactly like one process: pp = 2 (with chunked prompts, retractions, the radix cache and seeded
sampling), tp 2 x pp 2 with the counted collectives and sends of each stage, and an uneven split
of a tied-embedding model over three stages (a middle stage both receives and sends)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from transformers import LlamaConfig

from minisgl import LLM, SamplingParams
from minisgl.models.stage import PipelineStage, split_layers
from minisgl.scheduler.process import shut_down_ranks
from minisgl.server.args import ArgsError, check_args, parse_args
from minisgl.testing.server import RunningServer
from minisgl.testing.tiny_models import build_random_model

from test_kv_memory import TINY_POOL, _chat, _turns
from test_server_lifecycle import assert_all_gone, descendants

PROMPTS = [[5, 17, 99, 3], list(range(40, 71)), [7, 8, 9, 10, 11, 12], [300, 301, 302]]
GREEDY = SamplingParams(temperature=0, max_tokens=10, ignore_eos=True)


@pytest.mark.parametrize(("num_layers", "pp_size", "sizes"), [
    (2, 1, [2]), (2, 2, [1, 1]), (4, 2, [2, 2]), (5, 2, [3, 2]), (7, 3, [3, 2, 2]), (8, 3, [3, 3, 2]),
    (32, 3, [11, 11, 10]), (30, 4, [8, 8, 7, 7]),
])
def test_layers_split_into_contiguous_blocks_the_first_stages_larger(num_layers, pp_size, sizes) -> None:
    stages = split_layers(num_layers, pp_size)
    assert [len(s) for s in stages] == sizes
    assert [i for s in stages for i in s] == list(range(num_layers))  # each layer once, in order


@pytest.mark.parametrize(("num_layers", "pp_size", "message"), [
    (2, 3, "pp_size=3 exceeds num_hidden_layers=2"), (4, 0, "pp_size must be at least 1"),
])
def test_an_impossible_split_is_a_one_line_error(num_layers, pp_size, message) -> None:
    with pytest.raises(ValueError, match=message):
        split_layers(num_layers, pp_size)


def test_each_stage_loads_only_its_tensors() -> None:
    first, last = PipelineStage.of(0, 2, 5), PipelineStage.of(1, 2, 5, tie_word_embeddings=True)
    assert first.layers == range(0, 3) and last.layers == range(3, 5)
    assert first.holds("model.embed_tokens.weight") and not first.holds("lm_head.weight")
    assert first.holds("model.layers.2.mlp.up_proj.weight") and not first.holds("model.layers.3.mlp.up_proj.weight")
    assert not first.holds("model.norm.weight") and last.holds("model.norm.weight")
    assert last.holds("model.embed_tokens.weight")  # tied: the LM head's weight
    assert not PipelineStage.of(1, 2, 5).holds("model.embed_tokens.weight")
    assert last.kv_layer(3) == 0 and last.kv_layer(4) == 1  # the stage's pool holds its layers only


@pytest.fixture(scope="module")
def qwen3_dir(tiny_model_dir):
    return tiny_model_dir("qwen3")


@pytest.mark.timeout(600)
def test_two_stages_answer_like_one_process_through_chunks_and_retractions(qwen3_dir, capfd) -> None:
    """Both rounds of a multi-turn chat in a pool so small that requests are retracted, prompts
    chunked to 16 tokens, the radix cache on: the tokens of one process with a roomy pool. Seeded
    sampling too (the last stage samples; the others learn the tokens)."""
    sampled = SamplingParams(temperature=1.0, top_k=50, max_tokens=12, seed=5, ignore_eos=True)
    def generate(prompts, params):
        return [out.token_ids for out in llm.generate(prompts, params)]

    with LLM(qwen3_dir, dtype="float32", progress=False, num_pages=4096, cache="naive") as llm:
        expected = _chat(generate, *_turns())
        expected_sampled = generate(PROMPTS, sampled)
    with LLM(qwen3_dir, pp_size=2, dtype="float32", progress=False, max_prefill_tokens=16, **TINY_POOL) as llm:

        assert _chat(generate, *_turns()) == expected
        assert generate(PROMPTS, sampled) == expected_sampled
        backend = llm.backend
        shut_down_ranks(backend.ranks, backend.addrs, timeout_s=120)  # as `close` does, with time to spare
        assert [p.exitcode for p in backend.ranks] == [0, 0]  # in-flight micro-batches drained, both left cleanly
    assert "KV cache full: retracted" in capfd.readouterr().err


def _per_forward(report: dict) -> dict[str, float]:
    """Calls of each kind per forward pass, over every forward this rank counted."""
    calls: dict[str, int] = {}
    forwards = 0
    for stats in report["phases"].values():
        forwards += stats["forwards"]
        for c in stats["collectives"]:
            calls[c["kind"]] = calls.get(c["kind"], 0) + c["calls"]
    return {kind: n / forwards for kind, n in calls.items()}


@pytest.mark.timeout(600)
def test_tp2_x_pp2_answers_like_one_process_and_counts_the_formula(tiny_model_dir, tmp_path) -> None:
    """Per forward, stage s of a tp group: 2 all-reduces per layer it holds (+1 for the embedding on
    the first stage), the LM head's all-gather on the last, and one send / one receive of the
    activations per stage boundary."""
    model_dir = tiny_model_dir("llama")
    with LLM(model_dir, dtype="float32", num_pages=256, progress=False) as llm:
        expected = [o.token_ids for o in llm.generate(PROMPTS, GREEDY)]
    with LLM(model_dir, tp_size=2, pp_size=2, dtype="float32", num_pages=256, progress=False,
             comm_stats_dir=str(tmp_path)) as llm:
        assert [o.token_ids for o in llm.generate(PROMPTS, GREEDY)] == expected
    layers = split_layers(2, 2)
    for stage in range(2):
        for rank in range(2):
            report = json.loads((tmp_path / f"comm-pp{stage}-tp{rank}.json").read_text())
            expected_calls = {"all_reduce": 2 * len(layers[stage]) + (stage == 0)}
            expected_calls.update({"all_gather": 1, "recv": 1} if stage == 1 else {"send": 1})
            assert _per_forward(report) == expected_calls, (stage, rank)


def _tied_model(folder: Path, num_layers: int) -> Path:
    config = LlamaConfig(hidden_size=96, intermediate_size=192, num_attention_heads=6, num_key_value_heads=3,
                         vocab_size=997, tie_word_embeddings=True, num_hidden_layers=num_layers,
                         max_position_embeddings=512, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    build_random_model(config, seed=3).save_pretrained(folder)
    return folder


@pytest.mark.timeout(600)
def test_an_uneven_split_of_a_tied_model_over_three_stages(tmp_path) -> None:
    """4 layers on 3 stages (2, 1, 1): the middle stage receives and sends; the last stage holds the
    embedding table as its LM head."""
    model_dir = _tied_model(tmp_path / "tied-4-layers", 4)
    with LLM(model_dir, dtype="float32", num_pages=256, progress=False) as llm:
        expected = [o.token_ids for o in llm.generate(PROMPTS, GREEDY)]
    with LLM(model_dir, pp_size=3, dtype="float32", num_pages=256, progress=False) as llm:
        assert [o.token_ids for o in llm.generate(PROMPTS, GREEDY)] == expected


@pytest.mark.timeout(400)
def test_the_server_with_two_stages_answers_and_stops_cleanly(tiny_model_dir) -> None:
    """Only stage 0's rank 0 talks to the frontend; a shutdown reaches stage 1 with a step's messages."""
    model_dir = tiny_model_dir("llama")
    with LLM(model_dir, dtype="float32", num_pages=256, progress=False) as llm:
        expected = [o.token_ids for o in llm.generate(PROMPTS[:2], GREEDY)]
    server = RunningServer(["--model", str(model_dir), "--device", "cpu", "--dtype", "float32", "--num-pages", "256",
                            "--pp-size", "2"])
    try:
        children = descendants(server.process.pid)
        names = [line.split("started ")[1].split(" (pid")[0]
                 for line in server.log().splitlines() if "started " in line]
        assert {"minisgl-PP0-TP0-scheduler", "minisgl-PP1-TP0-scheduler"} <= set(names)
        for prompt, tokens in zip(PROMPTS, expected):
            body = {"input_ids": prompt,
                    "sampling_params": {"temperature": 0, "max_new_tokens": 10, "ignore_eos": True}}
            assert httpx.post(f"{server.base_url}/generate", json=body, timeout=60).json()["output_ids"] == tokens
        assert server.stop() == 0
        assert_all_gone(children)
    finally:
        server.stop()


def test_bad_pipeline_sizes_fail_before_any_process(tiny_model_dir) -> None:
    model_dir = tiny_model_dir("llama")  # 2 layers
    with pytest.raises(ValueError, match="pp_size=3 exceeds num_hidden_layers=2"):
        LLM(model_dir, pp_size=3)
    with pytest.raises(ArgsError, match="--pp-size: pp_size=4 exceeds num_hidden_layers=2"):
        check_args(parse_args(["--model", str(model_dir), "--device", "cpu", "--pp-size", "4"]))
    with pytest.raises(ValueError, match="without data parallelism"):
        LLM(model_dir, pp_size=2, dp_size=2)
