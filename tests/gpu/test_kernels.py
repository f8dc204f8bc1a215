"""The Triton kernels against the torch reference backend on a real GPU, at model-sized shapes:
SmolLM2 (9 heads / 3 KV heads, d 64), Qwen3-0.6B (16 / 8, d 128), MQA (6 / 1), page sizes 1 and 16,
prefixes up to 2k tokens, decode batches up to 64; the small-batch GEMV on a strided (row-parallel) weight;
the fused decode work (q/k norms and RoPE in the decode kernel, the fused decode layer) against the
unfused kernels, each with negative controls that must land outside the bound."""

from __future__ import annotations

import pytest
import torch

from minisgl.testing.attention_checks import (ROPE_MISTAKES, fused_kernel_errors, rope_decode_excess,
                                               run_attention_case)

HEADS = [(9, 3, 64), (16, 8, 128), (6, 1, 32)]
# fp32 runs use true fp32 products; bf16 against an fp32 reference lands near 1e-2 at most
TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 2e-2}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("page_size", [1, 16])
@pytest.mark.parametrize("heads", HEADS, ids=lambda h: f"{h[0]}q{h[1]}kv{h[2]}d")
def test_decode_matches_reference(heads, page_size: int, dtype: torch.dtype) -> None:
    pytest.importorskip("triton")
    generator = torch.Generator().manual_seed(7)
    prefix = torch.randint(0, 2048, (64,), generator=generator).tolist()
    prefix[:3] = [0, 1, 2047]  # a lone new token, a tiny context, and one past 2k
    result = run_attention_case("cuda", dtype, *heads, prefix, [1] * 64, page_size=page_size)
    assert result.kv_equal and result.finite
    assert result.out_rel_err < TOLERANCE[dtype], result


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("page_size", [1, 16])
@pytest.mark.parametrize("heads", HEADS, ids=lambda h: f"{h[0]}q{h[1]}kv{h[2]}d")
def test_extend_matches_reference(heads, page_size: int, dtype: torch.dtype) -> None:
    pytest.importorskip("triton")
    # fresh prompts, chunked prefill over a cached prefix, a prompt of one token
    prefix_lens = [0, 0, 700, 1500, 3]
    extend_lens = [1000, 1, 129, 64, 17]
    result = run_attention_case("cuda", dtype, *heads, prefix_lens, extend_lens, page_size=page_size)
    assert result.kv_equal and result.finite
    assert result.out_rel_err < TOLERANCE[dtype], result


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_fused_kernels_match_the_layers_torch_code(dtype: torch.dtype) -> None:
    pytest.importorskip("triton")
    errors = fused_kernel_errors("cuda", dtype)
    print(f"fused kernels {dtype}: " + ", ".join(f"{k} {v:.1e}" for k, v in errors.items()))
    assert max(errors.values()) < (1e-6 if dtype == torch.float32 else 1e-2), errors


def test_store_kv_skips_negative_slots() -> None:
    pytest.importorskip("triton")
    from minisgl.kernel.triton import store_kv

    k_cache = torch.full((10, 2, 64), 7.0, device="cuda", dtype=torch.bfloat16)
    v_cache = k_cache.clone()
    k = torch.randn(3, 2, 64, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(3, 2, 64, device="cuda", dtype=torch.bfloat16)
    store_kv(k_cache, v_cache, torch.tensor([4, -1, 9], device="cuda"), k, v)
    assert torch.equal(k_cache[4], k[0]) and torch.equal(v_cache[9], v[2])
    untouched = [i for i in range(10) if i not in (4, 9)]
    assert bool((k_cache[untouched] == 7).all()) and bool((v_cache[untouched] == 7).all())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("rows", [1, 4])
def test_small_batch_linear_takes_a_row_parallel_shard(rows: int, dtype: torch.dtype) -> None:
    # What chapter 07 does: `down.chunk(tp, dim=1)[rank]`, a view whose rows lie `in` elements
    # apart. Decode batches of <= 4 rows take the Triton GEMV through CUDA's kernel table; it once
    # refused such a weight on GPUs while the CPU path took it.
    pytest.importorskip("triton")
    from minisgl.kernel.cuda import TritonKernels

    generator = torch.Generator().manual_seed(3)
    down = torch.randn(576, 1536, generator=generator).to("cuda", dtype)  # SmolLM2's down_proj, [hidden, inter]
    shard = down.chunk(3, dim=1)[1]  # [576, 512], row stride 1536
    x = torch.randn(rows, 512, generator=generator).to("cuda", dtype)
    expected = torch.nn.functional.linear(x.float(), shard.float())
    # bf16: one rounding of the output; fp32: sums of 512 terms in another order
    bf16 = dtype == torch.bfloat16
    torch.testing.assert_close(TritonKernels().linear(x, shard).float(), expected, rtol=1e-2 if bf16 else 1e-4,
                               atol=5e-2 if bf16 else 1e-3)


ROPE_BATCHES = {  # prefix lengths: 16 splits at batch 1, several at 4, one split (no merge) at 64
    "one": [2047],
    "four": [0, 7, 300, 2047],
    "sixty-four": torch.randint(0, 2048, (64,), generator=torch.Generator().manual_seed(5)).tolist(),
}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("batch", ROPE_BATCHES)
@pytest.mark.parametrize("heads,qk_norm", [((9, 3, 64), False), ((16, 8, 128), True)], ids=["smollm2", "qwen3"])
def test_decode_kernel_norms_and_rotates_as_the_separate_kernels_do(heads, qk_norm: bool, batch: str,
                                                                   dtype: torch.dtype) -> None:
    pytest.importorskip("triton")
    case = dict(prefix_lens=ROPE_BATCHES[batch], qk_norm=qk_norm, page_size=16)
    excess = rope_decode_excess("cuda", dtype, *heads, **case)
    wrong = {m: rope_decode_excess("cuda", dtype, *heads, **case, mistake=m)
             for m in ROPE_MISTAKES if qk_norm or m != "no q/k norm"}
    print(f"fused RoPE {dtype} {batch}: {excess:.2f} of the bound; mistakes "
          + ", ".join(f"{m} {v:.0f}" for m, v in wrong.items()))
    assert excess <= 1
    assert all(v > 1 for v in wrong.values()), wrong


@pytest.mark.parametrize("name", ["llama", "qwen3"])
def test_the_fused_decode_layer_computes_what_the_plain_layers_do(name: str, tiny_model_dir) -> None:
    """One decode step of the engine's fused layers (GEMVs with norm / SiLU prologues, RoPE in the
    decode kernel) against the plain layers' forward, fp32 on the GPU; a wrong position and a dropped
    residual are rejected."""
    pytest.importorskip("triton")
    from minisgl.config import EngineConfig
    from minisgl.engine.engine import Engine
    from minisgl.testing.fused_layer_checks import LAYER_MISTAKES, fused_layer_excesses

    engine = Engine(EngineConfig(tiny_model_dir(name), device="cuda", dtype="float32", num_pages=512,
                                 attention_backend="triton", cuda_graph_max_bs=0, progress=False))
    try:
        wrong = fused_layer_excesses(engine, [None, *LAYER_MISTAKES])
        excess = wrong.pop(None)
    finally:
        engine.shutdown()
    print(f"fused layer {name}: {excess:.2f} of the bound; mistakes "
          + ", ".join(f"{m} {v:.0f}" for m, v in wrong.items()))
    assert excess <= 1
    assert all(v > 1 for v in wrong.values()), wrong
