"""Data parallelism: the dispatch policies, and two replicas behind the controller answering exactly
like one, offline (`LLM(dp_size=2)`) and through the server (`--dp-size 2`), whose /metrics shows
each replica's numbers next to the server's sums."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from minisgl import LLM, SamplingParams
from minisgl.scheduler.data_parallel import Dispatcher, pick_replica
from minisgl.testing.server import RunningServer

from test_server_lifecycle import assert_all_gone, descendants
from test_server_metrics import _metrics

PROMPTS = [[5, 17, 99, 3], list(range(40, 71)), [7, 8, 9, 10, 11, 12], [300, 301, 302]]
GREEDY = SamplingParams(temperature=0, max_tokens=10, ignore_eos=True)


def test_round_robin_cycles_whatever_the_load() -> None:
    assert [pick_replica("round-robin", [9, 0, 4], sent) for sent in range(7)] == [0, 1, 2, 0, 1, 2, 0]


def test_least_load_picks_the_fewest_and_the_lowest_index_of_equals() -> None:
    assert pick_replica("least-load", [3, 1, 2], 0) == 1
    assert pick_replica("least-load", [2, 1, 1], 5) == 1
    assert pick_replica("least-load", [0, 0], 1) == 0


@pytest.mark.parametrize(("policy", "loads", "message"), [("random", [0], "unknown DP policy 'random'"),
                                                          ("least-load", [], "no replicas")])
def test_bad_dispatch_input_is_a_clear_error(policy: str, loads: list[int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        pick_replica(policy, loads, 0)


def test_the_dispatcher_counts_each_replicas_unfinished_requests() -> None:
    dispatcher = Dispatcher("least-load", 2)
    assert [dispatcher.assign(uid) for uid in range(3)] == [0, 1, 0]
    dispatcher.finish([1])  # replica 1 is idle again: the next two requests go there first
    assert [dispatcher.assign(uid) for uid in (3, 4)] == [1, 1]
    assert dispatcher.loads == [2, 2]
    dispatcher.finish([0, 2, 99])  # 99 was never sent (or finished already): ignored
    assert dispatcher.loads == [0, 2] and sorted(dispatcher.replica_of) == [3, 4]
    round_robin = Dispatcher("round-robin", 2)
    round_robin.finish([])
    assert [round_robin.assign(uid) for uid in range(3)] == [0, 1, 0]


@pytest.mark.timeout(400)
@pytest.mark.parametrize("policy", ["round-robin", "least-load"])
def test_two_replicas_answer_like_one(tiny_model_dir, tmp_path, policy: str) -> None:
    model_dir = tiny_model_dir("llama")
    with LLM(model_dir, dtype="float32", num_pages=256, progress=False) as llm:
        expected = [o.token_ids for o in llm.generate(PROMPTS, GREEDY)]
    with LLM(model_dir, dtype="float32", num_pages=256, progress=False, dp_size=2, dp_policy=policy,
             comm_stats_dir=str(tmp_path)) as llm:
        assert [o.token_ids for o in llm.generate(PROMPTS, GREEDY)] == expected
    # the counter also counts forwards at tp = 1: each replica prefilled the prompts it was given,
    # alternately (all arrive together, so least-load alternates too: 1 request each, then 2, ...)
    prefilled = [json.loads((tmp_path / f"comm-dp{d}-tp0.json").read_text())["phases"]["prefill"]["tokens"]
                 for d in range(2)]
    assert prefilled == [len(PROMPTS[0]) + len(PROMPTS[2]), len(PROMPTS[1]) + len(PROMPTS[3])]


@pytest.mark.timeout(400)
def test_the_server_with_two_replicas_answers_like_one_and_stops_cleanly(tiny_model_dir) -> None:
    model_dir = tiny_model_dir("llama")
    with LLM(model_dir, dtype="float32", num_pages=256, progress=False) as llm:
        expected = [o.token_ids for o in llm.generate(PROMPTS, GREEDY)]
    server = RunningServer(["--model", str(model_dir), "--device", "cpu", "--dtype", "float32", "--num-pages", "256",
                            "--dp-size", "2", "--dp-policy", "least-load"])
    try:
        children = descendants(server.process.pid)
        names = [line.split("started ")[1].split(" (pid")[0]
                 for line in server.log().splitlines() if "started " in line]
        assert {"minisgl-dp-controller", "minisgl-DP0-TP0-scheduler", "minisgl-DP1-TP0-scheduler"} <= set(names)
        for prompt, tokens in zip(PROMPTS, expected):
            body = {"input_ids": prompt,
                    "sampling_params": {"temperature": 0, "max_new_tokens": 10, "ignore_eos": True}}
            response = httpx.post(f"{server.base_url}/generate", json=body, timeout=60)
            assert response.json()["output_ids"] == tokens
        deadline = time.monotonic() + 60
        while (metrics := _metrics(server.base_url)).get("minisgl_generation_tokens_total") != 40:
            assert time.monotonic() < deadline, metrics  # each replica's rank 0 reports about once a second
            time.sleep(0.3)
        # one request at a time: least-load finds both idle and picks the lower index, replica 0, each time
        per_replica = [metrics[f'minisgl_replica_generation_tokens_total{{replica="{d}"}}'] for d in range(2)]
        assert per_replica == [40, 0]
        free = [metrics[f'minisgl_replica_kv_pages{{replica="{d}",state="free"}}'] for d in range(2)]
        assert sum(free) == metrics['minisgl_kv_pages{state="free"}']
        assert server.stop() == 0
        assert_all_gone(children)
    finally:
        server.stop()
