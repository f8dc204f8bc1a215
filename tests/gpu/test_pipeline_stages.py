"""Pipeline stages on two GPUs (chapter 13): activations cross over NCCL point-to-point, control
steps over gloo; pp 2 (one GPU per stage) gives one GPU's fp32 greedy tokens, and counts one send
and one receive per micro-batch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from minisgl import LLM, SamplingParams
from minisgl.testing.shapes import make_shape_dir

GREEDY = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)
PROMPTS = [[5, 17, 99, 3], list(range(40, 71)), [7, 8, 9, 10, 11, 12], [300, 301, 302]]


@pytest.mark.timeout(600)
def test_two_stages_on_two_gpus_answer_like_one(tmp_path: Path) -> None:
    if torch.cuda.device_count() < 2:
        pytest.skip(f"needs 2 GPUs (one per stage); this machine has {torch.cuda.device_count()}")
    model_dir = make_shape_dir("llama-125m", tmp_path / "llama-125m")

    def tokens(**kwargs) -> list[list[int]]:
        with LLM(model_dir, device="cuda", dtype="float32", load_format="dummy", kv_memory_gb=1.0, progress=False,
                 **kwargs) as llm:
            return [out.token_ids for out in llm.generate(PROMPTS, GREEDY)]

    stats = tmp_path / "stats"
    assert tokens(pp_size=2, comm_stats_dir=str(stats)) == tokens()
    first = json.loads((stats / "comm-pp0-tp0.json").read_text())
    last = json.loads((stats / "comm-pp1-tp0.json").read_text())
    assert first["device"] == "cuda:0" and last["device"] == "cuda:1"
    for report, kind in ((first, "send"), (last, "recv")):
        decode = report["phases"]["decode"]
        calls = sum(c["calls"] for c in decode["collectives"] if c["kind"] == kind)
        assert calls == decode["forwards"], f"{kind}: {calls} for {decode['forwards']} decode forwards"
