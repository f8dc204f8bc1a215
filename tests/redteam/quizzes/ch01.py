"""Red team, quiz 01: ask the grader's own key loader. Stopped by: the file is parsed, not run."""
from exercises.grader.quiz import keys

Q1, Q2, Q3, Q4, Q5, Q6, Q7 = (keys("01")[f"Q{n}"] for n in range(1, 8))
