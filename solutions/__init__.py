"""Reference answers to exercises/, file for file, written from first principles with only what
each task's docstring allows (the engine's own implementation of a task is off limits while it is
graded); `pytest exercises --impl solutions` grades them. `quizzes/` holds the quiz keys.

Instructor material: a student release (`make student-release`) leaves this folder out."""
