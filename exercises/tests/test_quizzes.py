"""Grades every chapter's quiz file (`quizzes/chNN.py`): one test per question, worth its points.
A wrong answer is reported without the right one; where no key is at hand (a student release), a
well-formed answer is recorded as submitted for the autograder."""

from __future__ import annotations

import pytest

from exercises.grader import adapters, quiz
from exercises.grader.chapters import CHAPTERS
from exercises.grader.outcomes import NotAttempted, Submitted, WrongAnswer

CASES = [question for chapter in quiz.quiz_chapters() for question in quiz.questions(chapter)]


@pytest.mark.parametrize("question", [
    pytest.param(q, id=f"ch{q.chapter}-{q.id}", marks=pytest.mark.task(f"{CHAPTERS[q.chapter]}/quiz", weight=q.points))
    for q in CASES
])
def test_quiz(impl, question: quiz.Question):
    where = f"quizzes/ch{question.chapter}.py {question.id} ({question.kind})"
    answer = adapters.quiz_answer(impl, question.chapter, question.id)
    if answer is None:
        raise NotAttempted(f"quizzes/ch{question.chapter}.py: {question.id} is still None")
    problem = quiz.format_problem(question, answer)
    if problem:
        raise WrongAnswer(f"{where}: {problem}")
    keys = quiz.keys(question.chapter)
    if keys is None:
        raise Submitted(f"{where}: answer recorded; the autograder grades it")
    if not quiz.is_right(question, answer, keys[question.id]):
        raise WrongAnswer(f"{where}: {answer!r} is not right; the chapter explains it")
