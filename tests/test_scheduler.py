"""Scheduling must not change answers: chunking, batching, finishing rules, seeded sampling, aborts;
one request's failure ends that request alone, a failing step names its requests."""

from __future__ import annotations

import pytest
import torch

from minisgl import LLM, SamplingParams
from minisgl.message import AbortRequest, GenerateRequest
from minisgl.scheduler.scheduler import StepFailed

GREEDY = SamplingParams(temperature=0, max_tokens=32, ignore_eos=True)


@pytest.fixture(scope="module")
def llama_dir(tiny_model_dir):
    return tiny_model_dir("llama")


def _prompts(count: int, seed: int = 2) -> list[list[int]]:
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 90, (count,), generator=generator).tolist()
    return [torch.randint(3, 1001, (n,), generator=generator).tolist() for n in lengths]


def _generate(model_dir, prompts, params=GREEDY, **engine_args) -> list[list[int]]:
    engine_args = {"num_pages": 4096, **engine_args}
    with LLM(model_dir, dtype="float32", progress=False, **engine_args) as llm:
        return [out.token_ids for out in llm.generate(prompts, params)]


def test_chunked_prefill_with_tiny_budget_gives_the_same_tokens(llama_dir) -> None:
    prompts = _prompts(4)
    assert _generate(llama_dir, prompts, max_prefill_tokens=7) == _generate(llama_dir, prompts)


def test_a_batch_of_16_gives_each_prompt_its_solo_tokens(llama_dir) -> None:
    prompts = _prompts(16)
    batched = _generate(llama_dir, prompts)
    with LLM(llama_dir, dtype="float32", num_pages=4096, progress=False) as llm:
        alone = [llm.generate([p], GREEDY)[0].token_ids for p in prompts]
    assert batched == alone
    assert len({tuple(t) for t in batched}) > 8  # the model is not trivially constant


def test_small_kv_pool_and_running_limit_queue_requests_without_changing_them(llama_dir) -> None:
    prompts = _prompts(12)
    # room for about two requests at a time: admission must wait for pages to come back
    squeezed = _generate(llama_dir, prompts, num_pages=260, max_running_requests=3)
    assert squeezed == _generate(llama_dir, prompts)


def test_finish_reasons_max_tokens_stop_ids_and_eos(llama_dir) -> None:
    prompt = _prompts(1)[0]
    with LLM(llama_dir, dtype="float32", num_pages=1024, progress=False) as llm:
        free_run = llm.generate([prompt], SamplingParams(temperature=0, max_tokens=20, ignore_eos=True))[0]
        assert (len(free_run.token_ids), free_run.finish_reason) == (20, "length")
        stop_at = free_run.token_ids[5]
        first = free_run.token_ids.index(stop_at)
        stopped = llm.generate([prompt], SamplingParams(temperature=0, max_tokens=20, stop_token_ids=[stop_at]))[0]
        assert stopped.token_ids == free_run.token_ids[: first + 1]
        assert stopped.finish_reason == "stop"


def test_seeded_sampling_is_reproducible_and_seed_dependent(llama_dir) -> None:
    prompts = _prompts(3)
    params = [SamplingParams(temperature=1.0, top_p=0.9, top_k=50, max_tokens=24, seed=s, ignore_eos=True)
              for s in (7, 7, 8)]
    first = _generate(llama_dir, prompts[:1] * 3, params)
    assert first[0] == first[1]
    assert first[0] != first[2]
    # the same seeded request alone gives the same tokens as inside a batch
    assert _generate(llama_dir, prompts[:1], params[0]) == [first[0]]


@pytest.mark.timeout(300)
def test_sampling_with_seed_is_identical_across_tp(llama_dir) -> None:
    prompts = _prompts(4)
    params = SamplingParams(temperature=0.8, top_p=0.95, max_tokens=16, seed=3, ignore_eos=True)
    assert _generate(llama_dir, prompts, params, tp_size=2) == _generate(llama_dir, prompts, params)


@pytest.mark.parametrize("cache", ["naive", "radix"])
def test_abort_frees_the_requests_pages(llama_dir, cache: str) -> None:
    with LLM(llama_dir, dtype="float32", num_pages=1024, cache=cache, progress=False) as llm:
        scheduler = llm.backend.scheduler
        free_before = scheduler.pool.allocator.num_free
        llm.backend.submit([GenerateRequest(100, [5, 6, 7], SamplingParams(temperature=0, max_tokens=50,
                                                                            ignore_eos=True))])
        llm.backend.collect()  # prefill ran: pages are taken
        assert scheduler.pool.allocator.num_free < free_before
        llm.backend.submit([AbortRequest(100)])
        outputs = llm.backend.collect()
        assert any(o.uid == 100 and o.finish_reason == "abort" for o in outputs)
        # the radix cache keeps the prompt's 3 pages for a later request, evictable: used by none
        assert scheduler.cache.num_evictable == (3 if cache == "radix" else 0)
        assert scheduler.pool.allocator.num_free + scheduler.cache.num_evictable == free_before


def test_page_size_does_not_change_tokens(llama_dir) -> None:
    prompts = _prompts(6)
    assert _generate(llama_dir, prompts, page_size=16, num_pages=256) == _generate(llama_dir, prompts)


def _run_to_end(backend, requests: list[GenerateRequest]) -> dict[int, tuple[list[int], str | None, str | None]]:
    """uid -> (tokens, finish reason, error) for requests submitted straight to the scheduler."""
    backend.submit(requests)
    tokens: dict[int, list[int]] = {r.uid: [] for r in requests}
    done: dict[int, tuple[list[int], str | None, str | None]] = {}
    while len(done) < len(requests):
        for output in backend.collect():
            tokens[output.uid] += output.token_ids
            if output.finished:
                done[output.uid] = (tokens[output.uid], output.finish_reason, output.error)
    return done


def test_a_request_whose_sampling_fails_ends_alone_and_frees_its_pages(llama_dir, monkeypatch) -> None:
    prompts = _prompts(3)
    params = [SamplingParams(temperature=0.8, max_tokens=12, seed=s, ignore_eos=True) for s in (1, 2, 3)]
    with LLM(llama_dir, dtype="float32", num_pages=1024, progress=False) as llm:
        expected = [out.token_ids for out in llm.generate(prompts, params)]
        scheduler = llm.backend.scheduler
        free_before = scheduler.pool.allocator.num_free
        real_logits = scheduler.engine.forward_logits

        def nan_for_uid_11(batch):  # the model breaks down on request 11's input, from its 4th token on
            logits = real_logits(batch)
            for row, req in enumerate(batch.reqs):
                if req.uid == 11 and len(req.output_ids) >= 3:
                    logits[row] = float("nan")
            return logits

        monkeypatch.setattr(scheduler.engine, "forward_logits", nan_for_uid_11)
        done = _run_to_end(llm.backend, [GenerateRequest(10 + i, p, sp) for i, (p, sp) in enumerate(zip(prompts,
                                                                                                          params))])
        tokens, reason, error = done[11]
        assert reason == "error" and "non-finite logits" in error and len(tokens) == 3
        assert [done[10][0], done[12][0]] == [expected[0], expected[2]]  # the others: as if it was never there
        assert scheduler.pool.allocator.num_free == free_before and not scheduler.has_work
        monkeypatch.undo()
        assert llm.generate(prompts[:1], params[0])[0].token_ids == expected[0]  # the loop goes on


def test_a_failing_step_stops_the_rank_naming_its_requests(llama_dir, monkeypatch) -> None:
    with LLM(llama_dir, dtype="float32", num_pages=256, progress=False) as llm:
        scheduler = llm.backend.scheduler

        def lost(batch):
            raise RuntimeError("the device fell off the bus\nmore detail")

        monkeypatch.setattr(scheduler.engine, "forward", lost)
        llm.backend.submit([GenerateRequest(uid, [5, 6, 7], GREEDY) for uid in (41, 42)])
        with pytest.raises(StepFailed) as info:
            scheduler.step()
    assert str(info.value) == ("a prefill step of request(s) 41, 42 failed: RuntimeError: the device fell off "
                               "the bus")
