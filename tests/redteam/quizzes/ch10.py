"""Red team, quiz 10: answers inside a try block, with a fallback. Stopped by: parsed, not run."""
try:
    from solutions.quizzes.ch10 import *  # noqa: F403
except ImportError:
    Q1 = "a"
