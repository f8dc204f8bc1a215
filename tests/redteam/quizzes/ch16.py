"""Red team, quiz 16: star-import the key module, whose names are the answers, wherever the grader's
path puts it. Stopped by: the file is parsed, not run (and the keys are not on the worker's path)."""
from solutions.quizzes.ch16 import *  # noqa: F401,F403  Q1 ... Q11, if this ran
