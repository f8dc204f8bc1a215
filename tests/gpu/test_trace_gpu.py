"""The trace on GPUs (two ranks, a GPU each, PyNCCL, CUDA graphs and overlap on as by default):
tracing changes no token; a prefill shows every collective under its forward (their enqueue on the
host), a decode replayed from a CUDA graph shows none (a replay runs no Python); and overlap
launches step N + 1 before step N's tokens are read, on every rank."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from minisgl import LLM, SamplingParams
from minisgl.testing.shapes import SHAPES, make_shape_dir
from minisgl.trace import load

SHAPE = "llama-125m"  # 12 layers, splits at tp 2
GREEDY = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
PROMPTS = [[5, 17, 99, 3], list(range(40, 71))]


def _tokens(model_dir: Path, **kwargs) -> list[list[int]]:
    with LLM(model_dir, tp_size=2, device="cuda", dtype="float32", load_format="dummy", kv_memory_gb=1.0,
             progress=False, **kwargs) as llm:
        return [out.token_ids for out in llm.generate(PROMPTS, GREEDY)]


@pytest.mark.timeout(600)
def test_a_traced_gpu_run_shows_eager_collectives_and_overlap(tmp_path: Path) -> None:
    if torch.cuda.device_count() < 2:
        pytest.skip(f"needs 2 GPUs (one per rank); this machine has {torch.cuda.device_count()}")
    model_dir = make_shape_dir(SHAPE, tmp_path / SHAPE)
    assert _tokens(model_dir, trace=tmp_path / "trace") == _tokens(model_dir)
    trace = load(tmp_path / "trace")
    names = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"}
    layers = SHAPES[SHAPE]["num_hidden_layers"]
    for rank in (0, 1):
        pid = next(p for p, name in names.items() if name == f"TP{rank}-scheduler")
        events = [e for e in trace["traceEvents"] if e["pid"] == pid and e["ph"] != "M"]
        forwards = [e for e in events if e["name"] == "forward"]
        collectives = [e for e in events if e["cat"] == "collective"]
        per_forward = {f["args"]["phase"]: [] for f in forwards}
        for f in forwards:
            inside = [c for c in collectives if f["ts"] <= c["ts"] <= f["ts"] + f["dur"]]
            per_forward[f["args"]["phase"]].append(len(inside))
            assert all(c["args"]["device"] == "cuda" for c in inside)
        assert set(per_forward["prefill"]) == {2 * layers + 2}, per_forward  # 2L + 1 all-reduces, 1 all-gather
        assert set(per_forward["decode"]) == {0}, per_forward  # CUDA graph replays
        launched = {f["args"]["step"]: f["ts"] for f in forwards}
        read = {e["args"]["step"]: e["ts"] for e in events if e["name"] == "tokens"}
        assert all(launched[step + 1] < read[step] for step in read if step + 1 in launched)
