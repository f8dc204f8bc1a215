"""Quiz answer files, one per chapter: replace each `None` with your answer and run the grader."""
