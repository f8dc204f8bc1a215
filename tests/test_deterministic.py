"""`deterministic=True`: a request's greedy tokens are the same alone and inside a mixed batch."""

from __future__ import annotations

import torch

from minisgl import LLM
from minisgl.core import SamplingParams
from minisgl.layers.batch_invariant import ROW_TILE, in_row_tiles

GREEDY = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)


def mixed_prompts(count: int, vocab: int) -> list[list[int]]:
    generator = torch.Generator().manual_seed(3)
    lengths = torch.randint(1, 60, (count,), generator=generator).tolist()
    return [torch.randint(3, vocab, (n,), generator=generator).tolist() for n in lengths]


def test_row_tiles_give_each_row_the_same_bits_at_any_batch_size() -> None:
    weight = torch.randn(96, 200).bfloat16()
    rows = torch.randn(37, 200).bfloat16()
    batched = in_row_tiles(rows, lambda tile: torch.nn.functional.linear(tile, weight))
    assert batched.shape == (37, 96)
    for i in (0, ROW_TILE - 1, ROW_TILE, 36):
        alone = in_row_tiles(rows[i : i + 1], lambda tile: torch.nn.functional.linear(tile, weight))
        assert torch.equal(alone[0], batched[i])


def test_greedy_tokens_do_not_depend_on_the_batch(tiny_model_dir) -> None:
    model_dir = tiny_model_dir("llama")  # GQA 4:1 with 2 KV heads
    prompts = mixed_prompts(12, vocab=1001)
    # A small prefill budget chunks the long prompts differently alone and in the batch; the naive
    # cache computes every prompt afresh (a radix hit would reuse the batch's own KV for "alone").
    # One thread: a tiny model gains nothing from two, and a busy machine makes waiting threads costly
    with LLM(model_dir, dtype="bfloat16", deterministic=True, cache="naive", max_prefill_tokens=64, num_pages=4096,
             cpu_threads=1, progress=False) as llm:
        together = [out.token_ids for out in llm.generate(prompts, GREEDY)]
        alone = [llm.generate([prompt], GREEDY)[0].token_ids for prompt in prompts]
    # With deterministic=False, prompts 1 and 11 part ways on an AVX2 CPU (torch 2.13): a row
    # multiplied alone and inside the batch rounds differently in bf16, and close greedy choices flip.
    assert alone == together
