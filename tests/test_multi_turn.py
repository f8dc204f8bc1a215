"""The one multi-turn driver (`minisgl.testing.multi_turn.run_chat`, chapter 11 and
benchmark/prefix_cache.py) through `LLM.submit` / `LLM.collect`: each turn is the conversation so far,
sent when its previous answer is complete; the prefix cache supplies the shared part; the answers are
the same with and without it, and at tp 2 (fp32)."""

from __future__ import annotations

import pytest

from minisgl import LLM, SamplingParams
from minisgl.scheduler import SchedulerConfig
from minisgl.testing.engine_runs import InProcessRun
from minisgl.testing.multi_turn import run_chat

SYSTEM = list(range(10, 34))
CONVERSATIONS = [[SYSTEM + [40 + c, 50 + c], [60 + c, 61, 62], [70 + c]] for c in range(3)]
PARAMS = SamplingParams(temperature=0, max_tokens=5, ignore_eos=True)


def chat(model_dir, **engine_args):
    with LLM(model_dir, dtype="float32", num_pages=512, progress=False, **engine_args) as llm:
        before = llm.stats() if engine_args.get("tp_size", 1) == 1 else None
        run = run_chat(llm, CONVERSATIONS, PARAMS)
        after = llm.stats() if before is not None else None
    cached = None if before is None else after.cached_tokens_total - before.cached_tokens_total
    return run, cached


@pytest.mark.timeout(300)
def test_a_chat_through_llm_reuses_the_prefix_and_answers_alike(tiny_model_dir) -> None:
    model_dir = tiny_model_dir("llama")
    radix, cached = chat(model_dir)
    naive, none_cached = chat(model_dir, cache="naive")
    assert len(radix.answers) == 9 and all(len(a) == 5 for a in radix.answers)
    assert len(radix.ttft) == 9 and all(t > 0 for t in radix.ttft) and radix.seconds > max(radix.ttft)
    # every later turn finds its conversation so far (and the first turns the shared system prompt)
    assert none_cached == 0 and cached >= 6 * len(SYSTEM)
    assert sorted(radix.answers) == sorted(naive.answers)
    two_ranks, _ = chat(model_dir, tp_size=2)
    assert sorted(two_ranks.answers) == sorted(radix.answers)


def test_in_process_run_takes_the_same_driver(tiny_model_dir) -> None:
    run = InProcessRun(SchedulerConfig(model_path=tiny_model_dir("llama"), dtype="float32", num_pages=512,
                                       progress=False))
    try:
        answers = run_chat(run, CONVERSATIONS, PARAMS).answers
        assert run.scheduler.cache.tree.num_pages > 0  # the tree chapter 11 draws
    finally:
        run.close()
    assert sorted(answers) == sorted(chat(tiny_model_dir("llama"))[0].answers)
