"""The sampler and the sampling rules, without processes: any accepted temperature gives a real
token (a huge one draws evenly), top_k and top_p keep the draws inside their sets, logit bias and
penalties follow OpenAI's definitions, a request whose row cannot be sampled fails alone, and
`SamplingParams` refuses what it cannot honour, naming the parameter."""

from __future__ import annotations

import math

import pytest
import torch

from minisgl.core import GREEDY_BELOW, Req, SamplingError, SamplingParams
from minisgl.engine.sampler import sample

VOCAB = 50


def _req(uid: int = 0, output_ids: list[int] | None = None, **params) -> Req:
    sampling = SamplingParams(**params)
    return Req(uid, [1, 2, 3], sampling, 3 + sampling.max_tokens, output_ids=list(output_ids or []),
               generator=torch.Generator().manual_seed(uid))


def sample_every_row(logits: torch.Tensor, reqs: list[Req]) -> list[int]:
    """Every row ends its prompt (no middle chunk), so every row draws."""
    return sample(logits, reqs, [True] * len(reqs))


def _logits(rows: int = 1, scale: float = 30.0) -> torch.Tensor:
    return torch.randn(rows, VOCAB, generator=torch.Generator().manual_seed(rows)) * scale  # [rows, vocab]


@pytest.mark.parametrize("temperature", [1e-45, 5e-324, 1e-300, GREEDY_BELOW / 2, GREEDY_BELOW, 1e-4, 1e-3])
def test_tiny_temperatures_give_the_most_likely_token(temperature: float) -> None:
    # before: logits / 1e-45 overflowed to inf, softmax gave nan, and torch.multinomial raised in every rank
    logits = _logits(3)
    reqs = [_req(i, temperature=temperature) for i in range(3)]
    assert sample_every_row(logits, reqs) == logits.argmax(-1).tolist()
    assert all(r.failure is None for r in reqs)


DRAWS = 400  # seeded draws per test: rows of one batch, each request with a generator of its own


def _draws(logits: torch.Tensor, **params) -> list[int]:
    """DRAWS tokens drawn from the one row `logits` [vocab], each by a request seeded on its own."""
    reqs = [_req(i, seed=i, **params) for i in range(DRAWS)]
    tokens = sample_every_row(logits.expand(DRAWS, -1).contiguous(), reqs)
    assert all(r.failure is None for r in reqs)
    return tokens


def test_huge_temperature_samples_evenly_across_the_vocabulary() -> None:
    # at temperature 1e300 every token is as likely as any other, however peaked the logits: a
    # sampler that drops the temperature (or caps it) draws the few top tokens of these logits
    tokens = _draws(_logits(1)[0], temperature=1e300)
    assert all(0 <= t < VOCAB for t in tokens)
    counts = torch.bincount(torch.tensor(tokens), minlength=VOCAB)  # uniform: 8 per token expected
    assert (counts > 0).sum() >= 45 and counts.max() <= 24, counts.tolist()


def test_top_k_draws_only_the_k_most_likely_tokens() -> None:
    logits = torch.randn(VOCAB, generator=torch.Generator().manual_seed(7))  # broad at temperature 1
    top5 = set(logits.topk(5).indices.tolist())
    tokens = _draws(logits, temperature=1.0, top_k=5)
    assert set(tokens) == top5  # never outside the top 5 (without top_k two thirds of draws are), all 5 drawn
    assert set(_draws(logits, temperature=1.0)) > top5  # the same draws without top_k reach further


def test_top_p_draws_only_from_the_nucleus() -> None:
    # probabilities 0.4, 0.3, 0.2 on tokens 3, 11, 29, the last 0.1 spread over the other 47
    probs = torch.full((VOCAB,), 0.1 / (VOCAB - 3))
    probs[3], probs[11], probs[29] = 0.4, 0.3, 0.2
    logits = probs.log()
    # the smallest prefix reaching 0.65 is {3, 11} (0.7); 0.75 takes 29 too (0.9)
    assert set(_draws(logits, temperature=1.0, top_p=0.65)) == {3, 11}
    assert set(_draws(logits, temperature=1.0, top_p=0.75)) == {3, 11, 29}
    assert len(set(_draws(logits, temperature=1.0))) > 3  # the same draws without top_p reach further
    # top_k and top_p together: the narrower wins (top_k=2 keeps {3, 11} where top_p=0.75 keeps 29 too)
    assert set(_draws(logits, temperature=1.0, top_k=2, top_p=0.75)) == {3, 11}


def test_logit_bias_moves_the_greedy_choice() -> None:
    logits = _logits(1, scale=10.0)  # spread well below the bias of 100
    best, other = int(logits.argmax()), int(logits.argmin())
    assert sample_every_row(logits, [_req(temperature=0, logit_bias={other: 100.0})]) == [other]
    runner_up = int(logits[0].topk(2).indices[1])
    assert sample_every_row(logits, [_req(temperature=0, logit_bias={best: -100.0})]) == [runner_up]


def test_penalties_follow_openais_definition() -> None:
    logits = torch.zeros(1, VOCAB)
    logits[0, 7], logits[0, 8], logits[0, 9] = 3.0, 2.5, 1.0
    generated = [7, 7, 7, 8]  # 7 three times, 8 once
    # frequency: 7 -> 3 - 3 * 0.5 = 1.5, 8 -> 2.5 - 0.5 = 2.0: 8 wins
    assert sample_every_row(logits, [_req(output_ids=generated, temperature=0, frequency_penalty=0.5)]) == [8]
    # presence: 7 -> 3 - 1.8, 8 -> 2.5 - 1.8, 9 untouched at 1.0: 7 (1.2) still wins
    assert sample_every_row(logits, [_req(output_ids=generated, temperature=0, presence_penalty=1.8)]) == [7]
    # both: 7 -> 3 - 1.5 - 0.9 = 0.6, 8 -> 2.5 - 0.5 - 0.9 = 1.1, 9 untouched at 1.0: 8 wins
    both = dict(frequency_penalty=0.5, presence_penalty=0.9)
    assert sample_every_row(logits, [_req(output_ids=generated, temperature=0, **both)]) == [8]
    # a negative penalty encourages repetition: 9 -> 1 + 2 * 2 = 5
    assert sample_every_row(logits, [_req(output_ids=[9, 9], temperature=0, frequency_penalty=-2.0)]) == [9]


def test_only_plain_greedy_requests_skip_the_sampler() -> None:
    assert SamplingParams(temperature=0).is_plain_greedy
    assert SamplingParams(temperature=1e-9).is_plain_greedy  # below GREEDY_BELOW
    assert not SamplingParams(temperature=0, frequency_penalty=0.1).is_plain_greedy
    assert not SamplingParams(temperature=0, logit_bias={3: 1.0}).is_plain_greedy
    assert not SamplingParams(temperature=0.7).is_plain_greedy


def test_a_row_that_cannot_be_sampled_fails_alone() -> None:
    logits = _logits(3)
    logits[1] = float("nan")  # the model broke down on this request's input
    reqs = [_req(i, temperature=0.8, seed=i) for i in range(3)]
    tokens = sample_every_row(logits, reqs)
    assert reqs[1].failure is not None and "non-finite logits" in reqs[1].failure
    assert reqs[0].failure is None and reqs[2].failure is None
    alone = [sample_every_row(logits[i : i + 1], [_req(i, temperature=0.8, seed=i)])[0] for i in (0, 2)]
    assert [tokens[0], tokens[2]] == alone  # the others drew exactly what they draw alone


@pytest.mark.parametrize(
    ("params", "param"),
    [
        ({"temperature": math.nan}, "temperature"),
        ({"temperature": math.inf}, "temperature"),
        ({"temperature": -0.1}, "temperature"),
        ({"top_p": math.nan}, "top_p"),
        ({"top_p": 0}, "top_p"),
        ({"top_k": 2**64}, "top_k"),
        ({"top_k": -2}, "top_k"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_tokens": True}, "max_tokens"),
        ({"max_tokens": 2**64}, "max_tokens"),
        ({"stop_token_ids": [2**64]}, "stop_token_ids"),
        ({"seed": 2**63}, "seed"),
        ({"frequency_penalty": 2.5}, "frequency_penalty"),
        ({"presence_penalty": math.nan}, "presence_penalty"),
        ({"logit_bias": {5: 101.0}}, "logit_bias"),
        ({"logit_bias": {-1: 1.0}}, "logit_bias"),
    ],
)
def test_sampling_params_refuse_what_they_cannot_honour(params: dict, param: str) -> None:
    with pytest.raises(SamplingError) as info:
        SamplingParams(**params)
    assert info.value.param == param and "\n" not in str(info.value) and str(info.value).startswith(param)
