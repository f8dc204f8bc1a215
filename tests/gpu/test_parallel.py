"""Chapter 12 on GPUs: dummy weights are the same model at tp 1 and 2 (fp32, a GPU per rank), the
communication counter times PyNCCL collectives with CUDA events and counts chapter 09's formula,
and two data-parallel replicas, one per GPU, answer like one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from minisgl.testing.shapes import SHAPES, make_shape_dir

from two_gpus import dummy_tokens, needs_two_gpus

SHAPE = "llama-125m"  # 12 layers, splits at tp 2
@pytest.mark.timeout(600)
def test_dummy_weights_are_one_model_at_tp_1_and_2(tmp_path: Path) -> None:
    needs_two_gpus()
    model_dir = make_shape_dir(SHAPE, tmp_path / SHAPE)
    assert dummy_tokens(model_dir, tp_size=2) == dummy_tokens(model_dir)


@pytest.mark.timeout(600)
def test_the_counter_times_pynccl_collectives(tmp_path: Path) -> None:
    needs_two_gpus()
    model_dir = make_shape_dir(SHAPE, tmp_path / SHAPE)
    dummy_tokens(model_dir, tp_size=2, comm_stats_dir=str(tmp_path / "stats"))
    report = json.loads((tmp_path / "stats" / "comm-tp0.json").read_text())
    assert report["dist_backend"] == "pynccl" and report["device"] == "cuda:0"
    decode = report["phases"]["decode"]
    layers, hidden = SHAPES[SHAPE]["num_hidden_layers"], SHAPES[SHAPE]["hidden_size"]
    calls = {}
    for c in decode["collectives"]:
        calls[c["kind"]] = calls.get(c["kind"], 0) + c["calls"]
        if c["kind"] == "all_reduce":
            assert c["bytes"] == c["calls"] // decode["forwards"] * decode["tokens"] * hidden * 4
    assert calls == {"all_reduce": (2 * layers + 1) * decode["forwards"], "all_gather": decode["forwards"]}
    assert 0 < decode["comm_seconds"] < decode["seconds"]


@pytest.mark.timeout(600)
def test_two_replicas_on_two_gpus_answer_like_one(tmp_path: Path) -> None:
    needs_two_gpus()
    model_dir = make_shape_dir(SHAPE, tmp_path / SHAPE)
    stats = tmp_path / "stats"
    assert dummy_tokens(model_dir, dp_size=2, dp_policy="least-load", comm_stats_dir=str(stats)) == dummy_tokens(model_dir)
    devices = [json.loads((stats / f"comm-dp{d}-tp0.json").read_text())["device"] for d in range(2)]
    assert devices == ["cuda:0", "cuda:1"]
