"""The graded tests, one file per chapter; they reach your code only through grader/adapters.py."""
