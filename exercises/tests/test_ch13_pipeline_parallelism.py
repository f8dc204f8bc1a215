"""Grades chapter 13: the stage split of the layers (the chapter's examples, uneven counts, random
splits against the rules, plain ints, the errors) and which stages load each checkpoint tensor
(layers by the split, the embedding on the first stage and, tied, on the last, the norm and the
LM head on the last, one stage, the errors), ending with every tensor of a model loaded exactly
where the pipeline needs it."""

from __future__ import annotations

import random

import pytest

from exercises.grader import adapters
from exercises.grader.checks import assert_value_error
from exercises.grader.outcomes import WrongAnswer

SPLIT = "13-pipeline-parallelism/stage-split"
WEIGHTS = "13-pipeline-parallelism/stage-weights"


def _expect_split(impl: str, num_layers: int, pp_size: int, expected: list, why: str) -> None:
    got = adapters.split_layers(impl, num_layers, pp_size)
    if got != expected:
        raise WrongAnswer(f"split_layers({num_layers}, {pp_size}) returned {got!r}, expected {expected!r} ({why})")


@pytest.mark.task(SPLIT)
def test_split_examples(impl):
    _expect_split(impl, 5, 2, [(0, 3), (3, 5)], "the first stage takes the extra layer")
    _expect_split(impl, 8, 3, [(0, 3), (3, 6), (6, 8)], "two extra layers: stages 0 and 1, never the last")
    _expect_split(impl, 32, 2, [(0, 16), (16, 32)], "an even split")
    _expect_split(impl, 30, 4, [(0, 8), (8, 16), (16, 23), (23, 30)], "SmolLM2's 30 layers on 4 stages")


@pytest.mark.task(SPLIT)
def test_split_edges(impl):
    _expect_split(impl, 12, 1, [(0, 12)], "one stage holds everything")
    _expect_split(impl, 3, 3, [(0, 1), (1, 2), (2, 3)], "a layer per stage")
    _expect_split(impl, 7, 6, [(0, 2), (2, 3), (3, 4), (4, 5), (5, 6), (6, 7)], "one extra layer, on stage 0")


@pytest.mark.task(SPLIT)
def test_random_splits_follow_the_rules(impl):
    rng = random.Random()
    for _ in range(30):
        pp_size = rng.randint(1, 9)
        num_layers = rng.randint(pp_size, 100)
        got = adapters.split_layers(impl, num_layers, pp_size)
        base, extra = divmod(num_layers, pp_size)
        sizes = [base + (1 if s < extra else 0) for s in range(pp_size)]
        starts = [sum(sizes[:s]) for s in range(pp_size)]
        expected = [(start, start + size) for start, size in zip(starts, sizes)]
        if got != expected:
            raise WrongAnswer(f"split_layers({num_layers}, {pp_size}) returned {got!r}, expected {expected!r}")


@pytest.mark.task(SPLIT)
def test_split_returns_plain_ints(impl):
    got = adapters.split_layers(impl, 5, 2)
    if not isinstance(got, list) or len(got) != 2 or not all(isinstance(t, tuple) and len(t) == 2 for t in got):
        raise WrongAnswer(f"split_layers(5, 2) should return a list of two 2-tuples, got {got!r}")
    if not all(type(v) is int for t in got for v in t):
        raise WrongAnswer(f"split_layers should return plain ints, got {[[type(v).__name__ for v in t] for t in got]}")


@pytest.mark.task(SPLIT)
@pytest.mark.error_case
@pytest.mark.parametrize(("args", "mentions"), [((4, 0), "pp_size"), ((4, -2), "pp_size"), ((2, 3), "pp_size")],
                         ids=["zero", "negative", "more-stages-than-layers"])
def test_split_errors(impl, args, mentions):
    assert_value_error(f"split_layers{args}", lambda: adapters.split_layers(impl, *args), mentions)


def _expect_stages(impl: str, name: str, num_layers: int, pp_size: int, tied: bool, expected: list, why: str) -> None:
    got = adapters.stages_holding(impl, name, num_layers, pp_size, tied)
    if got != expected or not all(type(s) is int for s in got):
        raise WrongAnswer(f"stages_holding({name!r}, num_layers={num_layers}, pp_size={pp_size}, "
                          f"tie_word_embeddings={tied}) returned {got!r}, expected {expected!r} ({why})")


@pytest.mark.task(WEIGHTS)
def test_layers_go_where_the_split_puts_them(impl):
    _expect_stages(impl, "model.layers.3.mlp.up_proj.weight", 5, 2, False, [1], "layers 3, 4 are stage 1's")
    _expect_stages(impl, "model.layers.2.self_attn.q_proj.weight", 5, 2, False, [0], "layers 0-2 are stage 0's")
    _expect_stages(impl, "model.layers.5.input_layernorm.weight", 8, 3, True, [1], "8 on 3: stage 1 holds 3-5")
    _expect_stages(impl, "model.layers.7.self_attn.q_norm.weight", 8, 3, False, [2], "the last block")
    _expect_stages(impl, "model.layers.11.mlp.down_proj.weight", 12, 4, False, [3], "12 on 4: 9-11")
    _expect_stages(impl, "model.layers.10.mlp.down_proj.weight", 12, 1, False, [0], "one stage")


@pytest.mark.task(WEIGHTS)
def test_embedding_norm_and_head(impl):
    _expect_stages(impl, "model.embed_tokens.weight", 5, 2, False, [0], "the first stage embeds")
    _expect_stages(impl, "model.embed_tokens.weight", 5, 2, True, [0, 1], "tied: the last stage's LM head too")
    _expect_stages(impl, "model.embed_tokens.weight", 9, 3, True, [0, 2], "tied: first and last, not the middle")
    _expect_stages(impl, "model.norm.weight", 9, 3, False, [2], "the final norm runs on the last stage")
    _expect_stages(impl, "lm_head.weight", 9, 3, False, [2], "the LM head runs on the last stage")


@pytest.mark.task(WEIGHTS)
def test_one_stage_holds_a_tied_table_once(impl):
    _expect_stages(impl, "model.embed_tokens.weight", 4, 1, True, [0], "stage 0 is first and last: listed once")
    _expect_stages(impl, "lm_head.weight", 4, 1, False, [0], "the only stage")


@pytest.mark.task(WEIGHTS)
@pytest.mark.error_case
@pytest.mark.parametrize(("name", "num_layers", "pp_size", "mentions"), [
    ("model.layers.5.mlp.up_proj.weight", 5, 2, "5"), ("model.layers.12.mlp.up_proj.weight", 5, 2, "12"),
    ("model.rotary_emb.inv_freq", 5, 2, "model.rotary_emb.inv_freq"), ("embed_tokens.weight", 5, 2, "embed_tokens"),
    ("model.norm.weight", 2, 3, "pp_size"),
], ids=["layer-past-the-end", "layer-far-out", "unknown", "no-model-prefix", "bad-split"])
def test_stage_weights_errors(impl, name, num_layers, pp_size, mentions):
    assert_value_error(f"stages_holding({name!r}, {num_layers}, {pp_size}, False)",
                       lambda: adapters.stages_holding(impl, name, num_layers, pp_size, False), mentions)


@pytest.mark.task(WEIGHTS, weight=2)
def test_every_tensor_of_a_model_is_loaded_where_it_runs(impl):
    """A random Llama, split at random: every stage must load exactly the tensors its part of the
    forward pass reads, and together the stages every tensor."""
    rng = random.Random()
    for _ in range(10):
        num_layers, tied = rng.randint(2, 40), rng.random() < 0.5
        pp_size = rng.randint(1, min(num_layers, 8))
        names = ["model.embed_tokens.weight", "model.norm.weight"] + ([] if tied else ["lm_head.weight"])
        names += [f"model.layers.{i}.{part}" for i in range(num_layers)
                  for part in ("input_layernorm.weight", "self_attn.o_proj.weight", "mlp.gate_proj.weight")]
        base, extra = divmod(num_layers, pp_size)
        bounds, start = [], 0
        for s in range(pp_size):
            bounds.append((start, start + base + (s < extra)))
            start = bounds[-1][1]
        for name in names:
            if name.startswith("model.layers."):
                layer = int(name.split(".")[2])
                expected = [s for s, (a, b) in enumerate(bounds) if a <= layer < b]
            elif name == "model.embed_tokens.weight":
                expected = sorted({0, pp_size - 1}) if tied else [0]
            else:
                expected = [pp_size - 1]
            _expect_stages(impl, name, num_layers, pp_size, tied, expected, "the chapter's rules")
