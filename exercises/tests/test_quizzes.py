"""Grades every chapter's quiz file (`quizzes/chNN.py`): one test per question, worth its points.
A wrong answer is reported without the right one; where no key is at hand (a student release), a
well-formed answer is recorded as submitted for the autograder. Quiz files are read as data, never
run (quiz.py); the keys are read once, here, before any learner code runs anywhere."""

from __future__ import annotations

import pytest

from exercises.grader import adapters, quiz
from exercises.grader.chapters import CHAPTERS
from exercises.grader.outcomes import NotAttempted, Submitted, WrongAnswer

CASES = [question for chapter in quiz.quiz_chapters() for question in quiz.questions(chapter)]
KEYS = {chapter: quiz.keys(chapter) for chapter in quiz.quiz_chapters()}


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
    keys = KEYS[question.chapter]
    if keys is None:
        raise Submitted(f"{where}: answer recorded; the autograder grades it")
    if not quiz.is_right(question, answer, keys[question.id]):
        raise WrongAnswer(f"{where}: {answer!r} is not right; the chapter explains it")
