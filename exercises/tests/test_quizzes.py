"""Grades every chapter's quiz file (`quizzes/chNN.py`): one test per question, worth its points.
A wrong answer is reported without the right one; the chapter text has it."""

from __future__ import annotations

import math
import re

import pytest

from exercises.grader import adapters
from exercises.grader.chapters import CHAPTERS
from exercises.grader.outcomes import NotAttempted, WrongAnswer
from exercises.grader.quiz_keys import QUIZZES, Question


def _normalize(answer: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"[-_]", " ", answer.lower()))


def _grade(question: Question, got: object) -> str | None:
    """None when right, else what is wrong (never the right answer)."""
    if question.kind == "choice":
        if not isinstance(got, str) or not re.fullmatch(r"[a-zA-Z ,]+", got):
            return f"answer with the letter(s) of your choice, e.g. \"b\"; got {got!r}"
        letters = set(re.sub(r"[^a-z]", "", got.lower()))
        return None if letters == set(question.answer) else f"{got!r} is not right; re-read the chapter"
    if question.kind == "number":
        if isinstance(got, bool) or not isinstance(got, (int, float)):
            return f"answer with a number (int or float); got {got!r}"
        if math.isclose(got, question.answer, rel_tol=question.rel_tol, abs_tol=1e-9):
            return None
        return f"{got!r} is not within {question.rel_tol:.0%} of the answer (check the unit the question asks for)"
    if not isinstance(got, str):
        return f"answer in a sentence or two (a string); got {got!r}"
    said = _normalize(got)
    missing = [label for label, words in question.answer if not any(w in said for w in words)]
    return None if not missing else "your answer does not yet say: " + "; ".join(missing)


CASES = [(chapter, question) for chapter, questions in QUIZZES.items() for question in questions]


@pytest.mark.parametrize("chapter,question", [
    pytest.param(c, q, id=f"ch{c}-{q.id}", marks=pytest.mark.task(f"{CHAPTERS[c]}/quiz", weight=q.points))
    for c, q in CASES
])
def test_quiz(impl, chapter, question):
    got = adapters.quiz_answer(impl, chapter, question.id)
    if got is None:
        raise NotAttempted(f"quizzes/ch{chapter}.py: {question.id} is still None")
    problem = _grade(question, got)
    if problem:
        raise WrongAnswer(f"quizzes/ch{chapter}.py {question.id} ({question.kind}): {problem}")
