"""The communication counter (`--comm-stats-dir`): at tp = 2 every forward holds 2 · layers + 1
all-reduces of tokens · hidden · bytes each (chapter 09's formula) and one all-gather of this
rank's shard of the logits, filed per layer; every rank writes what it counted when it stops."""

from __future__ import annotations

import json

import pytest

from minisgl import LLM, SamplingParams
from minisgl.distributed import COMM_COUNTER
from minisgl.engine.engine import Engine
from minisgl.layers import vocab_shard_size
from minisgl.models.config import ModelConfig
from minisgl.scheduler import SchedulerConfig

PROMPTS = [[5, 17, 99, 3, 8], list(range(40, 51))]  # 2 requests, 16 prompt tokens
NEW_TOKENS = 3  # one prefill forward, then 2 decode forwards of 2 tokens


@pytest.mark.timeout(300)
def test_counted_collectives_match_the_formula(tiny_model_dir, tmp_path) -> None:
    model_dir = tiny_model_dir("llama")
    config = ModelConfig.from_dir(model_dir)
    params = SamplingParams(temperature=0, max_tokens=NEW_TOKENS, ignore_eos=True)
    with LLM(model_dir, tp_size=2, dtype="float32", num_pages=256, progress=False,
             comm_stats_dir=str(tmp_path)) as llm:
        llm.generate(PROMPTS, params)
    reports = [json.loads((tmp_path / f"comm-tp{rank}.json").read_text()) for rank in range(2)]
    layers, fp32 = config.num_layers, 4
    for report in reports:
        phases = report["phases"]
        assert phases["decode"]["forwards"] == NEW_TOKENS - 1  # prefill: one forward or two, as requests arrive
        for name, phase in phases.items():
            # rows of logits sampled: one per request in a prefill, one per token in a decode
            rows = len(PROMPTS) if name == "prefill" else phase["tokens"]
            all_reduce_bytes = phase["tokens"] * config.hidden_size * fp32  # summed over forwards
            found = {(c["site"], c["kind"]): (c["calls"], c["bytes"]) for c in phase["collectives"]}
            assert list(found) == [("embed_tokens", "all_reduce"), *((i, "all_reduce") for i in range(layers)),
                                   ("lm_head", "all_gather")], name  # filed in call order
            forwards = phase["forwards"]
            assert found == {
                ("embed_tokens", "all_reduce"): (forwards, all_reduce_bytes),
                **{(i, "all_reduce"): (2 * forwards, 2 * all_reduce_bytes) for i in range(layers)},
                ("lm_head", "all_gather"): (forwards, rows * vocab_shard_size(config.vocab_size, 2) * fp32),
            }, name
            assert 0 < phase["comm_seconds"] < phase["seconds"]


def test_the_counter_is_off_unless_asked_for(tiny_model_dir, tmp_path) -> None:
    model_dir = tiny_model_dir("llama")
    for stats_dir, on in ((None, False), (str(tmp_path), True)):
        engine = Engine(SchedulerConfig(model_path=model_dir, dtype="float32", num_pages=64, progress=False,
                                        comm_stats_dir=stats_dir))
        assert COMM_COUNTER.counting is on
        engine.shutdown()
    assert [p.name for p in tmp_path.iterdir()] == ["comm-tp0.json"]
