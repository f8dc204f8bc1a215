"""The quizzes as an instructor checks them: the learner's files are the key files without their
answers, every key is a well-formed answer, choice keys spread evenly over the letters, the right
option cannot be spotted by its length, multi-select keys vary in how many statements are true and
which, and the computed numeric keys follow from the configs they come from. (Instructor material:
it reads solutions/, which a student release leaves out.)"""

from __future__ import annotations

import re
from collections import Counter

import pytest

from exercises.grader import quiz
from exercises.grader.configs import LLAMA_31_8B as L8B
from exercises.grader.configs import SMOLLM2_135M as SMOL

CHAPTERS = quiz.quiz_chapters()
CHOICES = [(q, quiz.keys(q.chapter)[q.id]) for ch in CHAPTERS for q in quiz.questions(ch) if q.kind == "choice"]
MULTIS = [(q, quiz.keys(q.chapter)[q.id]) for ch in CHAPTERS for q in quiz.questions(ch) if q.kind == "multi"]


def _without_answers(source: str) -> str:
    """The questions alone: no docstring, every answer None."""
    body = source.split('"""', 2)[2]
    return re.sub(r"^(Q\d+) = .*$", r"\1 = None", body, flags=re.MULTILINE)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_learner_file_is_the_key_file_without_answers(chapter):
    learner = (quiz.QUESTIONS_DIR / f"ch{chapter}.py").read_text()
    keys = (quiz.KEYS_DIR / f"ch{chapter}.py").read_text()
    assert _without_answers(learner) == _without_answers(keys)
    assert re.findall(r"^Q\d+ = (.*)$", learner, re.MULTILINE) == ["None"] * len(quiz.questions(chapter))


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_key_is_a_well_formed_answer(chapter):
    keys = quiz.keys(chapter)
    questions = quiz.questions(chapter)
    assert sorted(keys) == sorted(q.id for q in questions)
    for question in questions:
        key = keys[question.id]
        assert quiz.format_problem(question, key) is None, f"ch{chapter} {question.id}: {key!r}"
        if question.kind == "multi":  # selecting everything, or one letter, must not be the answer
            assert 2 <= len(key) < len(question.letters), f"ch{chapter} {question.id}"
        if question.kind in ("multi", "order"):  # pasting a format hint back must not score
            assert key != quiz.example(question), f"ch{chapter} {question.id}"
        if question.kind in ("choice", "multi", "order"):
            assert question.letters == "abcdefgh"[:len(question.letters)] and len(question.letters) >= 4


def test_choice_keys_spread_evenly_over_the_letters():
    counts = Counter(key for _, key in CHOICES)
    assert set(counts) == set("abcd")
    assert max(counts.values()) - min(counts.values()) <= 3, counts


def test_multi_select_keys_vary_in_how_many_and_which():
    """No key repeats more than twice; at least three counts of true statements, none for more
    than half the questions; each letter right in a quarter to three quarters of the questions that
    offer it (so "pick a, c and d", or "pick three", is no strategy)."""
    keys = Counter(key for _, key in MULTIS)
    assert max(keys.values()) <= 2, keys.most_common(3)
    sizes = Counter(len(key) for _, key in MULTIS)
    assert len(sizes) >= 3 and max(sizes.values()) <= len(MULTIS) / 2, sizes
    for letter in "abcdefgh":
        offered = [key for question, key in MULTIS if letter in question.letters]
        if len(offered) >= 4:
            right = sum(letter in key for key in offered) / len(offered)
            assert 0.25 <= right <= 0.75, f"{letter!r} is right in {right:.0%} of the multi questions"


@pytest.mark.parametrize("extreme", [max, min], ids=["longest", "shortest"])
def test_the_right_option_is_not_given_away_by_its_length(extreme):
    """At most a third of the choice keys are the strictly longest (or shortest) option."""
    def stands_out(question: quiz.Question, key: str) -> bool:
        lengths = {letter: len(text) for letter, text in question.options}
        target = extreme(lengths.values())
        return lengths[key] == target and list(lengths.values()).count(target) == 1

    outliers = [f"ch{q.chapter} {q.id}" for q, key in CHOICES if stands_out(q, key)]
    assert len(outliers) <= len(CHOICES) / 3, outliers


KIB, MIB = 1024, 1024 * 1024
_AR_BYTES = L8B["hidden_size"] * 2  # one bf16 hidden vector per token
_AR_COUNT = 2 * L8B["num_hidden_layers"] + 1
_KV_TOKEN = 2 * L8B["num_hidden_layers"] * L8B["num_key_value_heads"] * L8B["head_dim"] * 2  # K and V, all layers
_SMOL_KV_TOKEN = 2 * SMOL["num_hidden_layers"] * SMOL["num_key_value_heads"] * SMOL["head_dim"] * 2
COMPUTED = {  # numeric keys that follow from the public configs, so a key cannot drift from its source
    ("05", "Q1"): SMOL["vocab_size"] // 3, ("05", "Q2"): -(-1001 // 4), ("05", "Q3"): 4 * -(-1001 // 4) - 1001,
    ("05", "Q8"): 2 * -(-1001 // 4), ("07", "Q3"): _KV_TOKEN / 2 / KIB, ("07", "Q4"): _KV_TOKEN / 8 / KIB,
    ("08", "Q5"): 2 * L8B["hidden_size"] * 2 / KIB, ("09", "Q1"): _AR_COUNT, ("09", "Q2"): _AR_BYTES / KIB,
    ("09", "Q3"): _AR_COUNT * _AR_BYTES / KIB, ("09", "Q4"): 2 * 3 / 4,
    ("09", "Q5"): _AR_COUNT * _AR_BYTES * 2 * 7 / 8 / KIB, ("09", "Q6"): L8B["vocab_size"] * 2 * 3 / 4 / KIB,
    ("09", "Q7"): 2048 * _AR_BYTES * _AR_COUNT / MIB, ("09", "Q8"): 16 * _AR_BYTES / KIB,
    ("09", "Q9"): 8 * MIB // _AR_BYTES, ("10", "Q2"): 500e6 * 2 / 4e12 * 1e6,
    ("10", "Q3"): 64 * 1000 * _SMOL_KV_TOKEN / MIB,
    ("11", "Q1"): 2 * _SMOL_KV_TOKEN / KIB, ("11", "Q2"): (1 << 30) // (8192 * 2 * _SMOL_KV_TOKEN),
    ("13", "Q1"): -(-L8B["num_hidden_layers"] // 3), ("13", "Q2"): 2 * (SMOL["num_hidden_layers"] // 4 + 1),
    ("13", "Q4"): 2 * L8B["hidden_size"] * 2 / KIB, ("13", "Q11"): 2 * L8B["num_hidden_layers"] // 2 + 1,
    ("16", "Q6"): _SMOL_KV_TOKEN / KIB,
}


@pytest.mark.parametrize("chapter,qid", list(COMPUTED), ids=[f"ch{c}-{q}" for c, q in COMPUTED])
def test_computed_keys_follow_from_the_configs(chapter, qid):
    question = next(q for q in quiz.questions(chapter) if q.id == qid)
    assert question.kind == "number"
    assert quiz.is_right(question, quiz.keys(chapter)[qid], COMPUTED[chapter, qid])
