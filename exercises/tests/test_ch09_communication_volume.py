"""Grades chapter 09's calculator: the Llama-3.1-8B numbers of chapter 09 (65 all-reduces, 8 KiB, 520 KiB
per token; 520 / 780 / 910 KiB per rank; 125 / 188 / 219 KiB of logits), SmolLM2, and random
configs (so no number can be hard-coded)."""

from __future__ import annotations

import math
import random

import pytest

from exercises.grader import adapters
from exercises.grader.checks import assert_value_error
from exercises.grader.configs import LLAMA_31_8B, SMOLLM2_135M
from exercises.grader.outcomes import WrongAnswer

KIB = 1024
TASK = "09-communication-volume/comm-volume"


def _random_configs(count: int = 5) -> list[dict]:
    rng = random.Random()
    return [{"num_hidden_layers": rng.randint(1, 96), "hidden_size": 64 * rng.randint(1, 256),
             "vocab_size": rng.randint(1000, 300_000)} for _ in range(count)]


def _check(impl: str, function: str, args: tuple, expected: float, note: str = "") -> None:
    got = adapters.comm_volume(impl, function, *args)
    if not isinstance(got, (int, float)) or not math.isclose(got, expected, rel_tol=1e-9, abs_tol=1e-9):
        shown = {k: v for k, v in args[0].items() if k in ("num_hidden_layers", "hidden_size", "vocab_size")} \
            if isinstance(args[0], dict) else args[0]
        raise WrongAnswer(f"{function}({shown}{', ' + ', '.join(map(str, args[1:])) if len(args) > 1 else ''}) "
                          f"returned {got!r}, expected {expected:g} {note}")


@pytest.mark.task(TASK)
def test_all_reduces_per_forward(impl):
    _check(impl, "all_reduces_per_forward", (LLAMA_31_8B,), 65, "(2 x 32 layers + 1 embedding)")
    _check(impl, "all_reduces_per_forward", (SMOLLM2_135M,), 61)
    for config in _random_configs():
        _check(impl, "all_reduces_per_forward", (config,), 2 * config["num_hidden_layers"] + 1)


@pytest.mark.task(TASK)
def test_all_reduce_bytes_per_token(impl):
    _check(impl, "all_reduce_bytes_per_token", (LLAMA_31_8B, 2), 8 * KIB, "(8 KiB in bf16)")
    _check(impl, "all_reduce_bytes_per_token", (SMOLLM2_135M, 4), 576 * 4)
    for config in _random_configs():
        _check(impl, "all_reduce_bytes_per_token", (config, 2), config["hidden_size"] * 2)


@pytest.mark.task(TASK)
def test_ring_factor(impl):
    for tp in range(1, 9):
        _check(impl, "ring_factor", (tp,), 2 * (tp - 1) / tp)
    assert_value_error("ring_factor(0)", lambda: adapters.comm_volume(impl, "ring_factor", 0))


@pytest.mark.task(TASK)
def test_sent_bytes_per_rank_per_token(impl):
    for tp, kib in ((2, 520), (4, 780), (8, 910)):  # chapter 09's table
        _check(impl, "sent_bytes_per_rank_per_token", (LLAMA_31_8B, tp, 2), kib * KIB, f"= {kib} KiB (chapter 09)")
    _check(impl, "sent_bytes_per_rank_per_token", (LLAMA_31_8B, 1, 2), 0, "(tp = 1 sends nothing)")
    for config in _random_configs():
        tp = random.choice([2, 3, 4, 8])
        payload = (2 * config["num_hidden_layers"] + 1) * config["hidden_size"] * 4
        _check(impl, "sent_bytes_per_rank_per_token", (config, tp, 4), payload * 2 * (tp - 1) / tp)


@pytest.mark.task(TASK)
def test_logits_gather_bytes_per_rank(impl):
    for tp, kib in ((2, 125), (4, 188), (8, 219)):  # chapter 09's table, rounded to whole KiB
        got = adapters.comm_volume(impl, "logits_gather_bytes_per_rank", LLAMA_31_8B, tp, 2)
        if not isinstance(got, (int, float)) or round(got / KIB) != kib:
            raise WrongAnswer(f"logits_gather_bytes_per_rank(Llama-3.1-8B, tp={tp}) = {got!r} bytes; "
                              f"chapter 09 gives about {kib} KiB")
    for config in _random_configs():
        _check(impl, "logits_gather_bytes_per_rank", (config, 4, 2), config["vocab_size"] * 2 * 3 / 4)
    _check(impl, "logits_gather_bytes_per_rank", (SMOLLM2_135M, 3, 4), 49152 * 4 * 2 / 3, "(fp32 logits)")
    _check(impl, "logits_gather_bytes_per_rank", (LLAMA_31_8B, 1, 2), 0, "(tp = 1 gathers nothing)")
    assert_value_error("logits_gather_bytes_per_rank(tp_size=0)",
                       lambda: adapters.comm_volume(impl, "logits_gather_bytes_per_rank", LLAMA_31_8B, 0, 2))
