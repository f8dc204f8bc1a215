"""Pages on demand, retraction and the radix cache on a GPU (chapter 11): the device page table
grows a row at a time inside CUDA graphs and under overlap scheduling, prefix hits reach the
extend kernels as prefix_len > 0, and none of it changes a greedy token.

fp32 with the Triton backend: tokens identical to a roomy pool without a prefix cache. FlashInfer
(bf16 only): identical up to the first near-tie, where two kernels' rounding may pick either of
two tokens whose logits are within a few bf16 steps.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import Qwen3Config

from minisgl import LLM
from minisgl.core import Req, SamplingParams
from minisgl.scheduler.batch import make_prefill_batch
from minisgl.testing.tiny_models import COMMON_CONFIG, build_random_model

CPU = torch.device("cpu")
GREEDY = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)


def _workload(seed: int = 0) -> tuple[list[list[int]], list[list[int]]]:
    """Round one: 5 prompts, 4 of them after one 40-token system prompt; round two continues each."""
    generator = torch.Generator().manual_seed(seed)

    def tokens(n: int) -> list[int]:
        return torch.randint(3, 1000, (n,), generator=generator).tolist()

    system = tokens(40)
    return [system + tokens(7 + 5 * i) for i in range(4)] + [tokens(60)], [tokens(5 + i) for i in range(5)]


def _run(model_dir: Path, **overrides) -> tuple[list[list[int]], LLM]:
    """Both rounds' tokens, and the LLM (still open: the caller shuts it down)."""
    config = dict(device="cuda", dtype="float32", num_pages=4096, progress=False, attention_backend="triton",
                  cuda_graph_max_bs=8, overlap_schedule=True, cache="naive")
    config.update(overrides)
    llm = LLM(model_dir, **config)
    first, questions = _workload()
    answers = [out.token_ids for out in llm.generate(first, GREEDY)]
    second = [p + a + q for p, a, q in zip(first, answers, questions)]
    return answers + [out.token_ids for out in llm.generate(second, GREEDY)], llm


def _tokens(model_dir: Path, **overrides) -> tuple[list[list[int]], int, int]:
    """(tokens, requests retracted, prompt tokens found in the cache); the tree checked."""
    tokens, llm = _run(model_dir, **overrides)
    try:
        assert llm.backend.scheduler.cache.check()
        stats = llm.backend.scheduler.stats()
        return tokens, stats.retracted_total, stats.cached_tokens_total
    finally:
        llm.shutdown()


@pytest.mark.parametrize("page_size", [1, 16])
def test_triton_graphs_overlap_radix_and_retraction_keep_fp32_tokens(page_size: int, tiny_model_dir) -> None:
    model_dir = tiny_model_dir("qwen3")
    reference, _, _ = _tokens(model_dir, page_size=page_size, num_pages=4096 // page_size,
                              cuda_graph_max_bs=0, overlap_schedule=False)
    roomy, retracted, cached = _tokens(model_dir, page_size=page_size, num_pages=4096 // page_size, cache="radix")
    assert roomy == reference and retracted == 0 and cached > 0
    tiny_pool = {1: 140, 16: 12}[page_size]  # pages: a few requests at a time
    squeezed, retracted, cached = _tokens(model_dir, page_size=page_size, num_pages=tiny_pool, cache="radix",
                                          max_running_requests=8)
    print(f"page_size {page_size}: {retracted} retracted, {cached} prompt tokens from the cache")
    assert retracted > 0 and cached > 0
    assert squeezed == reference


def _near_tie(llm: LLM, context: list[int], a: int, b: int) -> bool:
    """Whether tokens a and b are within four bf16 steps of each other after `context`."""
    engine = llm.backend.engine
    pool = engine.kv_pool
    req = Req(10_000, context, SamplingParams(temperature=0), len(context))
    req.pages = pool.allocator.allocate(pool.pages_for(len(context)))
    try:
        logits = engine.forward_logits(make_prefill_batch([req], [len(context)], pool, CPU))[0].float()
    finally:
        engine.release(req)
        pool.allocator.free(req.pages)
    top = float(logits.abs().max())
    return abs(float(logits[a] - logits[b])) <= 4 * 2.0 ** (torch.floor(torch.log2(torch.tensor(top))).item() - 7)


def test_flashinfer_radix_and_retraction_agree_up_to_a_near_tie(tmp_path: Path) -> None:
    pytest.importorskip("flashinfer", reason="flashinfer-python is not installed (an optional attention backend)")
    config = Qwen3Config(hidden_size=128, intermediate_size=256, num_attention_heads=4, num_key_value_heads=2,
                         head_dim=128, vocab_size=1001, tie_word_embeddings=True, **COMMON_CONFIG)
    build_random_model(config, seed=0).save_pretrained(tmp_path)
    flashinfer = dict(attention_backend="flashinfer", dtype="bfloat16", page_size=16)
    reference, llm = _run(tmp_path, num_pages=256, **flashinfer)
    try:
        squeezed, retracted, cached = _tokens(tmp_path, num_pages=12, cache="radix", max_running_requests=8,
                                              **flashinfer)
        assert retracted > 0 and cached > 0
        first, questions = _workload()
        prompts = first + [p + a + q for p, a, q in zip(first, reference, questions)]
        for prompt, want, got in zip(prompts, reference, squeezed):
            diverge = next((i for i, (x, y) in enumerate(zip(want, got)) if x != y), None)
            if diverge is not None:
                assert _near_tie(llm, prompt + want[:diverge], want[diverge], got[diverge]), (
                    f"tokens differ at {diverge} without a near-tie: {want} vs {got}")
    finally:
        llm.shutdown()
