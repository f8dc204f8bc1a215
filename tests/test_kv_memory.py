"""KV pages on demand, retraction and the radix prefix cache inside the real scheduler (chapter 11):
they must never change an answer. Greedy tokens with the radix cache equal those without it, in a
pool so small that requests are retracted and cached prefixes evicted, at tp 1 (with and without
overlap) and tp 2 and 3; seeded sampling goes on with the same draws after a retraction; and 64
requests without max_tokens all run at once on the default KV budget."""

from __future__ import annotations

import json

import pytest
import torch

from minisgl import LLM
from minisgl.core import SamplingParams
from minisgl.engine import sizing as sizing_module
from minisgl.message import GenerateRequest

GREEDY = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)
TINY_POOL = dict(num_pages=110, max_running_requests=8)  # forces retractions and evictions (checked below)


def _turns(seed: int = 0) -> tuple[list[list[int]], list[list[int]]]:
    """Two rounds of prompts: the first share a 30-token system prompt; the second continue each
    conversation (prompt + answer of round one + a new question), as a multi-turn chat does."""
    generator = torch.Generator().manual_seed(seed)

    def tokens(n: int) -> list[int]:
        return torch.randint(3, 1000, (n,), generator=generator).tolist()

    system = tokens(30)
    first = [system + tokens(5 + 3 * i) for i in range(4)] + [tokens(25)]
    questions = [tokens(4 + i) for i in range(len(first))]
    return first, questions


def _chat(run_generate, first: list[list[int]], questions: list[list[int]], params=GREEDY) -> list[list[int]]:
    answers = run_generate(first, params)
    second = [p + a + q for p, a, q in zip(first, answers, questions)]
    return answers + run_generate(second, params)


def _in_process(model_dir, params=GREEDY, **overrides):
    """(tokens of both rounds, the scheduler's stats, how many pages eviction freed) at tp = 1."""
    llm = LLM(model_dir, **{"dtype": "float32", "progress": False, "num_pages": 4096, **overrides})
    scheduler = llm.backend.scheduler
    evicted: list[int] = []
    tree = getattr(scheduler.cache, "tree", None)
    if tree is not None:
        def recording_evict(count: int, evict=tree.evict) -> list[int]:
            pages = evict(count)
            evicted.extend(pages)
            return pages

        tree.evict = recording_evict
    try:
        tokens = _chat(lambda prompts, p: [out.token_ids for out in llm.generate(prompts, p)], *_turns(),
                       params=params)
        assert scheduler.cache.check()
        stats = scheduler.stats()
        assert stats.kv_pages_free + stats.kv_pages_cached == stats.kv_pages_total  # every page came back
        return tokens, stats, len(evicted)
    finally:
        llm.shutdown()


@pytest.fixture(scope="module")
def qwen3_dir(tiny_model_dir):
    return tiny_model_dir("qwen3")  # tp 1, 2, 3


@pytest.fixture(scope="module")
def reference(qwen3_dir) -> list[list[int]]:
    """No prefix cache, a pool that never runs short: nothing retracted, nothing evicted."""
    tokens, stats, _ = _in_process(qwen3_dir, cache="naive")
    assert stats.retracted_total == 0 and stats.cached_tokens_total == 0
    return tokens


def test_radix_cache_reuses_prefixes_and_changes_no_token(qwen3_dir, reference) -> None:
    tokens, stats, _ = _in_process(qwen3_dir)
    assert tokens == reference
    first, _ = _turns()
    # round two finds each whole first conversation (round one runs in one batch: nothing cached yet)
    assert stats.cached_tokens_total >= sum(len(p) + GREEDY.max_tokens - 1 for p in first)
    assert stats.retracted_total == 0


@pytest.mark.parametrize(("cache", "overlap"), [("naive", False), ("radix", False), ("radix", True)])
def test_tiny_pool_retracts_and_evicts_without_changing_tokens(qwen3_dir, reference, cache: str,
                                                               overlap: bool) -> None:
    tokens, stats, evicted = _in_process(qwen3_dir, cache=cache, overlap_schedule=overlap, **TINY_POOL)
    assert tokens == reference
    assert stats.retracted_total > 0
    assert evicted > 0 or cache == "naive"


@pytest.mark.timeout(600)
@pytest.mark.parametrize("tp_size", [2, 3])
def test_tiny_pool_at_tp_gives_the_tp1_tokens(qwen3_dir, reference, tp_size: int) -> None:
    """Every rank holds its own tree and takes the same retractions: the same tokens as tp = 1
    (and the same pool retracts and evicts at tp = 1, test above)."""
    with LLM(qwen3_dir, tp_size=tp_size, dtype="float32", progress=False, **TINY_POOL) as llm:
        def generate(prompts, params):
            return [out.token_ids for out in llm.generate(prompts, params)]

        assert _chat(generate, *_turns()) == reference


def test_seeded_sampling_continues_its_stream_after_a_retraction(qwen3_dir) -> None:
    params = SamplingParams(temperature=1.0, top_k=50, max_tokens=20, seed=5, ignore_eos=True)
    roomy, _, _ = _in_process(qwen3_dir, params=params, cache="naive")
    squeezed, stats, _ = _in_process(qwen3_dir, params=params, **TINY_POOL)
    assert stats.retracted_total > 0
    assert squeezed == roomy


def test_seeded_sampling_does_not_depend_on_prompt_chunks(qwen3_dir) -> None:
    """A middle chunk of a prompt draws nothing from the request's generator."""
    params = SamplingParams(temperature=1.0, max_tokens=12, seed=9, ignore_eos=True)
    prompts = [list(range(10, 60)), list(range(200, 230))]
    runs = [LLM(qwen3_dir, dtype="float32", num_pages=512, progress=False, max_prefill_tokens=budget)
            for budget in (2048, 7)]
    try:
        whole, chunked = ([out.token_ids for out in run.generate(prompts, params)] for run in runs)
    finally:
        for run in runs:
            run.shutdown()
    assert chunked == whole


def test_a_running_requests_prompt_is_shared_and_still_computes_the_last_token(qwen3_dir) -> None:
    llm = LLM(qwen3_dir, dtype="float32", num_pages=512, progress=False)
    run = llm.backend
    extends: list[list[int]] = []
    forward = run.engine.forward

    def recording(batch):
        extends.append(list(batch.extend_lens))
        return forward(batch)

    run.engine.forward = recording
    try:
        prompt = list(range(40, 80))
        run.io.inbox.append(GenerateRequest(0, prompt, GREEDY))
        run.scheduler.step()  # request 0's prefill: its prompt enters the tree
        run.io.inbox.append(GenerateRequest(1, prompt, GREEDY))
        run.scheduler.step()  # request 1, while request 0 runs: 39 tokens from the cache
        assert extends == [[40], [1]]  # the last token is computed all the same: its logits
        while run.scheduler.has_work:
            run.scheduler.step()
        tokens: dict[int, list[int]] = {0: [], 1: []}
        for output in run.io.outbox:
            tokens[output.uid] += output.token_ids
        assert tokens[0] == tokens[1] and len(tokens[0]) == GREEDY.max_tokens
        assert run.scheduler.stats().cached_tokens_total == 39
    finally:
        llm.shutdown()


def test_questions_sent_together_over_one_document_compute_it_once(qwen3_dir) -> None:
    """The first question's prefill computes the document; the others wait one step for it, then
    compute only their own question (radix); without the cache every prompt is computed whole."""
    document = list(range(100, 200))
    prompts = [document + [7 + i, 8, 9] for i in range(4)]
    extends, tokens = {}, {}
    for cache in ("naive", "radix"):
        llm = LLM(qwen3_dir, dtype="float32", num_pages=1024, cache=cache, progress=False)
        forward = llm.backend.engine.forward
        extends[cache] = []

        def recording(batch, forward=forward, seen=extends[cache]):
            seen.append(list(batch.extend_lens))
            return forward(batch)

        llm.backend.engine.forward = recording
        try:
            tokens[cache] = [out.token_ids for out in llm.generate(prompts, GREEDY)]
        finally:
            llm.shutdown()
    assert tokens["radix"] == tokens["naive"]
    assert extends["naive"][0] == [103] * 4
    assert extends["radix"][:2] == [[103], [3, 3, 3]]


def test_64_requests_without_max_tokens_all_run_at_once(tmp_path) -> None:
    """Chat clients rarely send max_tokens, so each request may run to the 8192-token context.
    Reserving that up front (the old admission) fits 8 of these requests in the default CPU
    budget at most; pages on demand admit all 64 in the first step."""
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
              "intermediate_size": 256, "num_hidden_layers": 8, "num_attention_heads": 4,
              "num_key_value_heads": 4, "head_dim": 64, "vocab_size": 1000, "max_position_embeddings": 8192,
              "rms_norm_eps": 1e-5, "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": True}
    (tmp_path / "config.json").write_text(json.dumps(config))
    llm = LLM(tmp_path, dtype="float32", load_format="dummy", progress=False)
    run = llm.backend
    try:
        pool = run.engine.kv_pool
        assert pool.allocator.num_pages * pool.page_size < 64 * 8192 // 4  # the old admission would queue most
        chat = SamplingParams(temperature=0, max_tokens=8192, ignore_eos=True)  # what the API sets: "the context"
        run.io.inbox.extend(GenerateRequest(uid, [1] + list(range(10 + uid, 30 + uid)), chat) for uid in range(64))
        for _ in range(3):
            run.scheduler.step()
        assert len(run.scheduler.running) == 64
    finally:
        llm.shutdown()


def test_the_default_cpu_budget_counts_memory_the_kernel_can_reclaim(tmp_path, monkeypatch, tiny_model_dir) -> None:
    """Free pages exclude the page cache, which after some file reading holds most of a machine's
    memory; MemAvailable counts it. Without MemAvailable (or /proc) the free pages are all there is."""
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24683000 kB\nMemFree:         1153000 kB\nMemAvailable:   23921000 kB\n")
    assert sizing_module.available_host_memory(meminfo) == 23921000 * 1024
    monkeypatch.setattr(sizing_module.os, "sysconf", {"SC_AVPHYS_PAGES": 300, "SC_PAGE_SIZE": 4096}.get)
    (tmp_path / "old").write_text("MemTotal: 24683000 kB\nMemFree: 1153000 kB\n")
    assert sizing_module.available_host_memory(tmp_path / "old") == 300 * 4096
    assert sizing_module.available_host_memory(tmp_path / "missing") == 300 * 4096
    monkeypatch.undo()

    monkeypatch.setattr(sizing_module, "available_host_memory", lambda: 2 << 30)  # 20 % of it is the budget
    llm = LLM(tiny_model_dir("llama"), dtype="float32", progress=False)
    run = llm.backend
    try:
        pool = run.engine.kv_pool
        page_bytes = 2 * pool.k_buffer[:, 0].nbytes * pool.page_size
        assert pool.allocator.num_pages == int(0.2 * (2 << 30) // page_bytes)
    finally:
        llm.shutdown()
