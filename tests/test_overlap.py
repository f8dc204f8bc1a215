"""Overlap scheduling (step N+1 prepared while step N runs) gives exactly the tokens, lengths and
finish reasons of the plain loop. Forced on here on a CPU, where it is off by default."""

from __future__ import annotations

import pytest

from minisgl import LLM
from minisgl.core import SamplingParams

PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [100, 200, 300], list(range(20, 60)), [7] * 5, [9, 8]]
CASES = {
    "max-tokens": [SamplingParams(temperature=0, max_tokens=n) for n in (3, 12, 7, 1, 20)],
    "stop-ids": [SamplingParams(temperature=0, max_tokens=30, stop_token_ids=[t]) for t in range(40, 45)],
    # a sampled request turns overlap off while it runs, and back on after it leaves
    "with-sampling": [
        SamplingParams(temperature=0, max_tokens=10),
        SamplingParams(temperature=0.8, max_tokens=4, seed=3),
        *[SamplingParams(temperature=0, max_tokens=9)] * 3,
    ],
}


def _run(model_dir, params: list[SamplingParams], overlap: bool) -> list[list[int]]:
    # 3 running at most and a 16-token prefill budget: queueing, chunking and admission mid-decode
    with LLM(model_dir, dtype="float32", num_pages=512, max_running_requests=3, max_prefill_tokens=16,
             overlap_schedule=overlap, progress=False) as llm:
        return [out.token_ids for out in llm.generate(PROMPTS, params) + llm.generate(PROMPTS[:2], params[:2])]


@pytest.mark.parametrize("case", CASES)
def test_overlap_gives_the_same_outputs(case: str, tiny_model_dir) -> None:
    model_dir = tiny_model_dir("qwen3")
    expected = _run(model_dir, CASES[case], overlap=False)
    assert _run(model_dir, CASES[case], overlap=True) == expected
    assert [len(tokens) for tokens in expected[:5]] == [p.max_tokens for p in CASES[case]] or case == "stop-ids"


def _decode_batch_sizes(model_dir, overlap: bool) -> list[int]:
    llm = LLM(model_dir, dtype="float32", num_pages=512, overlap_schedule=overlap, progress=False)
    sizes: list[int] = []
    for name in ("forward", "forward_async"):
        original = getattr(llm.backend.engine, name)

        def recording(batch, original=original):
            if batch.phase == "decode":
                sizes.append(batch.size)
            return original(batch)

        setattr(llm.backend.engine, name, recording)  # this instance only
    try:
        llm.generate(PROMPTS, CASES["max-tokens"])
    finally:
        llm.shutdown()
    return sizes


def test_overlap_schedules_no_request_past_its_length_limit(tiny_model_dir) -> None:
    """A request whose last output slot is taken (by a placeholder) is not decoded again, so overlap
    runs the same decode batches as the plain loop: no wasted row, and the same batch sizes, which
    the kernels' numerics may depend on."""
    model_dir = tiny_model_dir("qwen3")
    plain = _decode_batch_sizes(model_dir, overlap=False)
    # max_tokens=1: prefill only
    assert plain[0] == sum(p.max_tokens > 1 for p in CASES["max-tokens"]) and plain[-1] == 1
    assert _decode_batch_sizes(model_dir, overlap=True) == plain
