"""`deterministic=True`: a request's greedy tokens are the same alone and inside a mixed batch.

Whether this CPU's matmul library rounds a row differently at another batch size depends on the
CPU (an AVX2 one does, others may not), so the tests that must fail on every machine when the row
tiles are lost use a matmul that is shape-sensitive by construction: its output moves with the
number of rows of the call, far more than one rounding, and only fixed-shape calls undo that."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from minisgl import LLM
from minisgl.core import SamplingParams
from minisgl.cpu.batch_invariant import ROW_TILE, in_row_tiles

GREEDY = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)


def mixed_prompts(count: int, vocab: int) -> list[list[int]]:
    generator = torch.Generator().manual_seed(3)
    lengths = torch.randint(1, 60, (count,), generator=generator).tolist()
    return [torch.randint(3, vocab, (n,), generator=generator).tolist() for n in lengths]


_REAL_LINEAR = F.linear


def shape_sensitive_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """F.linear, plus an offset that depends on the number of rows of the call: a matmul library
    that rounds by call shape, exaggerated so that every CPU shows it."""
    out = _REAL_LINEAR(x, weight, bias)
    rows = x.shape[0] if x.dim() > 1 else 1
    columns = torch.arange(out.shape[-1], dtype=torch.float32)
    return out + (0.05 * torch.sin(columns * (rows % 13 + 1))).to(out.dtype)


def test_row_tiles_give_each_row_the_same_bits_at_any_batch_size() -> None:
    weight = torch.randn(96, 200).bfloat16()
    rows = torch.randn(37, 200).bfloat16()
    for linear in (F.linear, shape_sensitive_linear):  # the second fails without fixed tiles on any CPU
        batched = in_row_tiles(rows, lambda tile: linear(tile, weight))
        assert batched.shape == (37, 96)
        for i in (0, ROW_TILE - 1, ROW_TILE, 36):
            alone = in_row_tiles(rows[i : i + 1], lambda tile: linear(tile, weight))
            assert torch.equal(alone[0], batched[i])


def _alone_and_together(model_dir, deterministic: bool) -> tuple[list[list[int]], list[list[int]]]:
    """The greedy tokens of 12 mixed prompts, each generated alone and all in one batch."""
    prompts = mixed_prompts(12, vocab=1001)
    # A small prefill budget chunks the long prompts differently alone and in the batch; the naive
    # cache computes every prompt afresh (a radix hit would reuse the batch's own KV for "alone").
    # One thread: a tiny model gains nothing from two, and a busy machine makes waiting threads costly
    with LLM(model_dir, dtype="bfloat16", deterministic=deterministic, cache="naive", max_prefill_tokens=64,
             num_pages=4096, cpu_threads=1, progress=False) as llm:
        together = [out.token_ids for out in llm.generate(prompts, GREEDY)]
        alone = [llm.generate([prompt], GREEDY)[0].token_ids for prompt in prompts]
    return alone, together


def test_greedy_tokens_do_not_depend_on_the_batch(tiny_model_dir) -> None:
    alone, together = _alone_and_together(tiny_model_dir("llama"), deterministic=True)  # GQA 4:1, 2 KV heads
    # With deterministic=False, prompts 1 and 11 part ways on an AVX2 CPU (torch 2.13): a row
    # multiplied alone and inside the batch rounds differently in bf16, and close greedy choices flip.
    assert alone == together


def test_greedy_tokens_do_not_depend_on_the_batch_even_where_matmuls_round_by_shape(
        tiny_model_dir, monkeypatch: pytest.MonkeyPatch) -> None:
    # every dense matmul of the model (the CPU kernel table calls F.linear) made shape-sensitive
    monkeypatch.setattr(torch.nn.functional, "linear", shape_sensitive_linear)
    model_dir = tiny_model_dir("llama")
    alone, together = _alone_and_together(model_dir, deterministic=False)
    assert alone != together  # the fake matmul does part requests' ways when shapes differ
    alone, together = _alone_and_together(model_dir, deterministic=True)
    assert alone == together  # ...and the row tiles give every row one shape
