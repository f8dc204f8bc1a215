"""The Triton kernels and backend on a CPU, through Triton's interpreter (TRITON_INTERPRET=1), at
small fp32 shapes: the same kernel code the GPU runs, checked against the torch backend in CI.

On a machine with a GPU these are skipped: tests/gpu runs the compiled kernels there (and the
interpreter must not be switched on in a process that also compiles them).
"""

from __future__ import annotations

import importlib.util
import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before any kernel module is imported

from minisgl import LLM  # noqa: E402
from minisgl.core import SamplingParams  # noqa: E402
from minisgl.testing.attention_checks import (ROPE_MISTAKES, fused_kernel_errors, rope_decode_excess,  # noqa: E402
                                               run_attention_case)

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("triton") is None,
                       reason="triton is not installed (pip install triton runs these kernels in its CPU interpreter)"),
    pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present: tests/gpu checks the compiled kernels"),
]

CASES = {
    # name: (q heads, kv heads, head_dim, prefix_lens, extend_lens, page_size)
    "decode-gqa": (4, 2, 16, [3, 300, 0], [1, 1, 1], 1),  # 4 splits, the last one empty for every request
    "decode-no-split": (4, 2, 16, list(range(0, 160, 10)), [1] * 16, 1),  # 16 requests: one split, no merge
    "decode-mqa-pages": (6, 1, 32, [3, 130, 10], [1, 1, 1], 4),
    "extend-fresh-and-prefix": (4, 2, 16, [0, 5, 17], [7, 3, 20], 1),
    "extend-pages": (6, 3, 32, [3, 70, 0], [5, 70, 33], 4),
}


@pytest.mark.parametrize("name", CASES)
def test_kernels_match_torch_backend(name: str) -> None:
    q_heads, kv_heads, head_dim, prefix_lens, extend_lens, page_size = CASES[name]
    result = run_attention_case("cpu", torch.float32, q_heads, kv_heads, head_dim, prefix_lens, extend_lens, page_size)
    assert result.kv_equal and result.finite
    assert result.out_rel_err < 1e-5, result


@pytest.mark.parametrize("qk_norm", [False, True], ids=["llama", "qwen3"])
def test_decode_kernel_norms_and_rotates_q_and_k_as_the_separate_kernels_do(qk_norm: bool) -> None:
    """`forward_rope`: q/k norms and RoPE inside the decode kernel (4 splits merged in the kernel, one
    request with a single key), against the norm and RoPE kernels then `forward`; each realistic
    mistake on the fused side lands outside the bound."""
    case = dict(num_q_heads=4, num_kv_heads=2, head_dim=16, prefix_lens=[3, 300, 0], qk_norm=qk_norm, page_size=2)
    assert rope_decode_excess("cpu", torch.float32, **case) <= 1
    for mistake in ROPE_MISTAKES if qk_norm else [m for m in ROPE_MISTAKES if m != "no q/k norm"]:
        assert rope_decode_excess("cpu", torch.float32, **case, mistake=mistake) > 1, mistake


def test_fused_kernels_match_the_layers_torch_code() -> None:
    errors = fused_kernel_errors("cpu", torch.float32)
    assert max(errors.values()) < 1e-6, errors


def test_store_kv_writes_nowhere_for_negative_slots() -> None:
    from minisgl.kernel.triton import store_kv

    k_cache = torch.full((6, 2, 16), 7.0)
    v_cache = k_cache.clone()
    k, v = torch.randn(3, 2, 16), torch.randn(3, 2, 16)
    store_kv(k_cache, v_cache, torch.tensor([4, -1, 1]), k, v)
    assert torch.equal(k_cache[4], k[0]) and torch.equal(v_cache[1], v[2])
    assert bool((k_cache[[0, 2, 3, 5]] == 7).all())


@pytest.mark.timeout(300)
def test_engine_with_triton_backend_and_overlap_matches_torch_backend(tiny_model_dir) -> None:
    prompts = [[5, 6, 7, 8, 9, 10, 11], [100, 200, 300], list(range(20, 60))]
    params = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    outputs = []
    for backend, overlap in (("torch", False), ("triton", True)):
        with LLM(tiny_model_dir("llama"), dtype="float32", num_pages=256, attention_backend=backend,
                 overlap_schedule=overlap, max_prefill_tokens=16, progress=False) as llm:  # the 40-token prompt: chunked
            outputs.append([out.token_ids for out in llm.generate(prompts, params)])
    assert outputs[0] == outputs[1]


@pytest.mark.timeout(300)
def test_engine_with_triton_backend_prefix_hits_and_retraction_match_torch_backend(tiny_model_dir) -> None:
    """Prefix hits reach the extend kernel as prefix_len > 0 over borrowed pages, and a pool of 15
    pages makes decode steps grow page tables and retract a request."""
    stem = list(range(100, 130))
    prompts = [stem + [5, 6, 7], stem + [8, 9], list(range(300, 330))]
    params = SamplingParams(temperature=0, max_tokens=10, ignore_eos=True)
    outputs = []
    for backend, cache, num_pages in (("torch", "naive", 256), ("triton", "radix", 15)):
        with LLM(tiny_model_dir("llama"), dtype="float32", num_pages=num_pages, page_size=4,
                 attention_backend=backend, overlap_schedule=True, cache=cache, progress=False) as llm:
            outputs.append([out.token_ids for out in llm.generate(prompts, params)])
            stats = llm.backend.scheduler.stats()
    assert stats.retracted_total > 0 and stats.cached_tokens_total > 0
    assert outputs[0] == outputs[1]


@pytest.mark.parametrize("layout", ["row-parallel-shard", "transposed"])
def test_small_batch_linear_takes_a_weight_that_is_not_contiguous(layout: str) -> None:
    # Chapter 07's reference MLP keeps `down.chunk(tp, dim=1)[rank]`: rows of the shard lie `in`
    # elements apart, not `in / tp`. The kernel must read it as it is (it once raised instead).
    from minisgl.kernel.triton.linear import small_batch_linear

    gen = torch.Generator().manual_seed(0)
    full = torch.randn(24, 40, generator=gen)  # [out, in]
    weight = full.chunk(2, dim=1)[1] if layout == "row-parallel-shard" else torch.randn(20, 24, generator=gen).t()
    assert not weight.is_contiguous()
    x, bias = torch.randn(3, weight.shape[1], generator=gen), torch.randn(weight.shape[0], generator=gen)
    expected = torch.nn.functional.linear(x.double(), weight.double(), bias.double()).float()
    # fp32 sums of 20 products: a few ulps of the largest partial sum
    torch.testing.assert_close(small_batch_linear(x, weight, bias)[0], expected, rtol=1e-5, atol=1e-5)
    silu_expected = torch.nn.functional.linear(
        (torch.nn.functional.silu(x[:, :10]) * x[:, 10:]).double(), weight[:, :10].double()).float()
    torch.testing.assert_close(small_batch_linear(x, weight[:, :10], None, "silu_and_mul")[0], silu_expected,
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("tokens,top_k,experts", [(1, 2, 8), (5, 2, 4), (40, 3, 6), (0, 2, 4)])
def test_fused_moe_matches_the_torch_loop(tokens: int, top_k: int, experts: int) -> None:
    from minisgl.kernel.triton.fused_moe import fused_expert_outputs
    from minisgl.layers import TorchKernels
    from minisgl.testing.tolerance import assert_within, expert_mlp_bound

    generator = torch.Generator().manual_seed(tokens)
    hidden, inter = 80, 40  # neither a multiple of the 64-wide tiles: masked edges
    x = torch.randn(tokens, hidden, generator=generator)
    topk_ids = torch.stack([torch.randperm(experts, generator=generator)[:top_k] for _ in range(tokens)]) \
        if tokens else torch.empty(0, top_k, dtype=torch.int64)
    gate_up = 0.2 * torch.randn(experts, 2 * inter, hidden, generator=generator)
    down = 0.2 * torch.randn(experts, hidden, inter, generator=generator)
    fused = fused_expert_outputs(x, topk_ids, gate_up, down)
    assert_within(fused, TorchKernels().expert_outputs(x, topk_ids, gate_up, down),
                  expert_mlp_bound(x, topk_ids, gate_up, down))


def test_align_by_expert_pads_each_run_to_whole_blocks() -> None:
    from minisgl.kernel.triton.fused_moe import align_by_expert

    experts = torch.tensor([2, 0, 2, 2, 0])  # pairs 0..4; expert 1 gets none
    sorted_pairs, block_expert = align_by_expert(experts, num_experts=3, block_m=2)
    pad = 5
    assert sorted_pairs.tolist()[:6] == [1, 4, 0, 2, 3, pad]  # expert 0: one block, expert 2: two
    assert block_expert.tolist()[:3] == [0, 2, 2] and (block_expert[3:] == 3).all()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", ["qwen3", "qwen3-moe"])  # q/k norms and biases; an experts' MLP
def test_the_fused_decode_layer_computes_what_the_plain_layers_do(name: str, tiny_model_dir, monkeypatch) -> None:
    """The CUDA plug-in's decoder layer (minisgl/kernel/cuda.py) on a decode-sized batch, its GEMVs
    and their norm / SiLU prologues in the interpreter, against the layers' own forward."""
    import minisgl.cpu as cpu_plugin
    from minisgl.core import Req, forward_context
    from minisgl.config import EngineConfig
    from minisgl.engine.engine import Engine
    from minisgl.kernel.cuda import FusedDecodeLayer, TritonKernels, is_small_batch
    from minisgl.layers import install_kernels
    from minisgl.scheduler.batch import make_prefill_batch

    monkeypatch.setattr(cpu_plugin, "prepacking_available", lambda: False)  # plain tensors, as on CUDA
    engine = Engine(EngineConfig(tiny_model_dir(name), dtype="float32", num_pages=64, progress=False))
    tokens = [5, 6, 7]  # 3 rows: within the fused layer's batch limit

    def last_logits() -> torch.Tensor:
        req = Req(0, tokens, SamplingParams(temperature=0), len(tokens))
        req.pages = engine.kv_pool.allocator.allocate(engine.kv_pool.pages_for(len(tokens)))
        batch = make_prefill_batch([req], [len(tokens)], engine.kv_pool, engine.device)
        engine.attn_backend.prepare(batch)
        with torch.inference_mode(), forward_context(batch, engine.attn_backend):
            return engine.model.forward(batch)[0]

    try:
        plain = last_logits()
        install_kernels("cpu", TritonKernels())  # what `accelerate_cuda` installs for CUDA tensors
        for layer in engine.model.model.layers:
            layer.forward = FusedDecodeLayer(layer)
        assert is_small_batch(torch.empty(len(tokens), 8))
        fused = last_logits()
    finally:
        install_kernels("cpu", None)  # the next engine of this process installs its own
        engine.shutdown()
    # fp32 sums in other orders through every layer: a few ulps of the largest logit, with room
    torch.testing.assert_close(fused, plain, rtol=1e-4, atol=1e-4 * plain.abs().max().item())


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", ["llama", "qwen3"])  # RoPE alone; q/k norms and RoPE in the decode kernel
def test_the_fused_decode_layer_on_a_decode_step_computes_what_the_plain_layers_do(name: str, tiny_model_dir,
                                                                                    monkeypatch) -> None:
    """A decode step on the Triton attention backend: the fused layer's GEMVs and its attention with
    the norms and RoPE in the decode kernel, against the plain layers. On llama, the negative
    controls too: a wrong position and a dropped residual are rejected (the bound is the same
    function for both models; each control costs a decode step in the interpreter)."""
    import minisgl.cpu as cpu_plugin
    from minisgl.config import EngineConfig
    from minisgl.engine.engine import Engine
    from minisgl.kernel.cuda import TritonKernels
    from minisgl.layers import install_kernels
    from minisgl.testing.fused_layer_checks import LAYER_MISTAKES, fused_layer_excesses

    monkeypatch.setattr(cpu_plugin, "prepacking_available", lambda: False)  # plain tensors, as on CUDA
    engine = Engine(EngineConfig(tiny_model_dir(name), dtype="float32", num_pages=256, attention_backend="triton",
                                 progress=False))
    install_kernels("cpu", TritonKernels())  # what `accelerate_cuda` installs for CUDA tensors
    try:
        mistakes = LAYER_MISTAKES if name == "llama" else ()
        excess = fused_layer_excesses(engine, [None, *mistakes])
        assert excess[None] <= 1
        for mistake in mistakes:
            assert excess[mistake] > 1, mistake
    finally:
        install_kernels("cpu", None)  # the next engine of this process installs its own
        engine.shutdown()
