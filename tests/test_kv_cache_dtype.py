"""`kv_cache_dtype="bfloat16"` (`--kv-cache-dtype bfloat16`) under fp32 activations on a CPU (chapter
11): keys and values are stored as bf16, so the same memory holds twice the tokens; every step of
the model stays fp32 and reads them back widened. The logits move by the rounding of the cached
values and no more; deterministic runs stay batch-invariant; what it cannot mean is refused."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from minisgl import LLM
from minisgl.core import Req, SamplingParams
from minisgl.config import EngineConfig
from minisgl.engine.engine import Engine
from minisgl.engine.precision import resolve_precision
from minisgl.scheduler.batch import make_decode_batch, make_prefill_batch
from minisgl.server.args import parse_args

MODEL = "llama"  # GQA 4:1 with 2 KV heads
PROMPTS = [[1, 5, 9, 200, 17, 4, 4, 81], [1, 300, 301, 302, 9, 9, 9, 40, 7, 12, 13], [1, 77, 78]]


def engine(model_dir, **overrides) -> Engine:
    config = dict(dtype="float32", num_pages=256, max_running_requests=8, cpu_threads=2, progress=False)
    return Engine(EngineConfig(model_dir, **{**config, **overrides}))


def prefill_then_decode(engine: Engine, tokens: list[list[int]]) -> list[torch.Tensor]:
    """Logits [reqs, vocab] of a prefill of PROMPTS, then of one decode step per column of `tokens`
    (fed the same tokens whatever the logits, so two engines see the same inputs)."""
    reqs = []
    for uid, prompt in enumerate(PROMPTS):
        req = Req(uid, prompt, SamplingParams(temperature=0), len(prompt) + len(tokens[0]) + 1)
        req.pages = engine.kv_pool.allocator.allocate(engine.kv_pool.pages_for(req.max_total_len))
        reqs.append(req)
    logits = [engine.forward_logits(make_prefill_batch(reqs, [len(p) for p in PROMPTS], engine.kv_pool,
                                                       engine.device))]
    for step in range(len(tokens[0])):
        for req, row in zip(reqs, tokens):
            req.cached_len = req.total_len
            req.output_ids.append(row[step])
        logits.append(engine.forward_logits(make_decode_batch(reqs, engine.kv_pool, engine.device)))
    return logits


def test_a_bf16_cache_holds_twice_the_tokens_in_the_same_memory(tiny_model_dir) -> None:
    pages = {}
    for kv_cache_dtype in ("auto", "bfloat16"):
        run = engine(tiny_model_dir(MODEL), num_pages=None, kv_memory_gb=0.01, kv_cache_dtype=kv_cache_dtype)
        try:
            pool = run.kv_pool
            assert run.dtype == torch.float32  # the model's own dtype does not change
            assert pool.k_buffer.dtype == pool.v_buffer.dtype == (torch.bfloat16 if kv_cache_dtype == "bfloat16"
                                                                  else torch.float32)
            pages[kv_cache_dtype] = pool.allocator.num_pages
        finally:
            run.shutdown()
    assert pages["bfloat16"] in (2 * pages["auto"], 2 * pages["auto"] + 1)  # floor(memory / page bytes)


def test_logits_move_by_the_rounding_of_the_cached_values_only(tiny_model_dir) -> None:
    # prefill (the torch attention over the cache) and four decode steps (the C kernel where it is built;
    # its CPU-graph replays: tests/test_cpu_graph.py)
    tokens = [[11, 12, 13, 14], [21, 22, 23, 24], [31, 32, 33, 34]]
    logits = {}
    for kv_cache_dtype in ("auto", "bfloat16"):
        run = engine(tiny_model_dir(MODEL), kv_cache_dtype=kv_cache_dtype)
        try:
            logits[kv_cache_dtype] = prefill_then_decode(run, tokens)
        finally:
            run.shutdown()
    for fp32_cache, bf16_cache in zip(logits["auto"], logits["bfloat16"]):
        assert bf16_cache.dtype == torch.float32
        assert not torch.equal(fp32_cache, bf16_cache)  # the bf16 cache was really read
        # each cached value is off by at most 2^-8 of itself; through the attention and the layers above
        # (random weights amplify it: up to 1.4 % measured) within 5 % of the logits' largest magnitude,
        # the bound bf16 matmuls are held to (tests/test_prepacked.py)
        torch.testing.assert_close(bf16_cache, fp32_cache, rtol=0, atol=0.05 * fp32_cache.abs().max().item())


def test_a_bf16_cache_stays_batch_invariant_when_deterministic(tiny_model_dir) -> None:
    generator = torch.Generator().manual_seed(3)
    prompts = [torch.randint(3, 1001, (n,), generator=generator).tolist() for n in (1, 9, 33, 58, 17, 4)]
    greedy = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    with LLM(tiny_model_dir(MODEL), dtype="float32", kv_cache_dtype="bfloat16", deterministic=True, cache="naive",
             max_prefill_tokens=64, num_pages=4096, cpu_threads=1, progress=False) as llm:
        assert llm.backend.engine.kv_pool.k_buffer.dtype == torch.bfloat16
        together = [out.token_ids for out in llm.generate(prompts, greedy)]
        alone = [llm.generate([prompt], greedy)[0].token_ids for prompt in prompts]
    assert alone == together  # rounding a stored value does not depend on the batch around it


@pytest.mark.timeout(300)
def test_every_tp_rank_keeps_a_bf16_cache_and_gives_the_tp1_tokens(tiny_model_dir) -> None:
    # The option travels to each rank's engine, and a rank's heads round the same fp32 values as at
    # tp = 1. The fp32 cache's tokens differ somewhere in 8 x 32 (the random model's logits are
    # nearly flat, so its near-ties flip): equal tokens at tp = 2 mean its ranks read bf16 caches.
    generator = torch.Generator().manual_seed(4)
    prompts = [torch.randint(3, 1001, (n,), generator=generator).tolist() for n in (5, 23, 12, 40, 7, 31, 2, 16)]
    greedy = SamplingParams(temperature=0, max_tokens=32, ignore_eos=True)
    tokens = {}
    for tp_size, kv_cache_dtype in ((1, "auto"), (1, "bfloat16"), (2, "bfloat16")):
        with LLM(tiny_model_dir(MODEL), tp_size=tp_size, dtype="float32", kv_cache_dtype=kv_cache_dtype,
                 num_pages=1024, progress=False) as llm:
            tokens[tp_size, kv_cache_dtype] = [out.token_ids for out in llm.generate(prompts, greedy)]
    assert tokens[1, "bfloat16"] != tokens[1, "auto"]
    assert tokens[2, "bfloat16"] == tokens[1, "bfloat16"]


def test_the_cli_flag_reaches_the_engine_config(tiny_model_dir) -> None:
    args = parse_args(["--model", str(tiny_model_dir(MODEL)), "--kv-cache-dtype", "bfloat16"])
    assert args.scheduler.kv_cache_dtype == "bfloat16"
    with pytest.raises(SystemExit):
        parse_args(["--model", str(tiny_model_dir(MODEL)), "--kv-cache-dtype", "fp8"])


@pytest.mark.parametrize("overrides, resolved", [
    (dict(dtype="float32"), "float32"),  # auto: the model's dtype
    (dict(dtype="bfloat16"), "bfloat16"),
    (dict(dtype="float32", kv_cache_dtype="bfloat16"), "bfloat16"),
    (dict(dtype="bfloat16", kv_cache_dtype="bfloat16", device="cuda"), "bfloat16"),  # what CUDA runs already
], ids=["fp32", "bf16", "bf16-cache", "cuda-bf16"])
def test_auto_is_the_models_dtype(tiny_model_dir, overrides: dict, resolved: str) -> None:
    config = resolve_precision(EngineConfig(tiny_model_dir(MODEL), quantization="none", **overrides))
    assert config.kv_cache_dtype == resolved
    assert resolve_precision(config) == config  # a resolved config resolves to itself (the engine resolves again)


@pytest.mark.parametrize("overrides, message", [
    (dict(dtype="float32", kv_cache_dtype="float16"), "unknown kv_cache_dtype 'float16'; use auto or bfloat16"),
    (dict(dtype="float32", kv_cache_dtype="bfloat16", device="cuda"), "runs on the CPU only; on CUDA use dtype"),
], ids=["unknown", "cuda-fp32"])
def test_what_a_bf16_cache_cannot_mean_is_refused(tiny_model_dir, overrides: dict, message: str) -> None:
    config = EngineConfig(tiny_model_dir(MODEL), quantization="none")
    with pytest.raises(ValueError, match=message):
        resolve_precision(dataclasses.replace(config, **overrides))
