"""The capstone's plug for chapter 15's notebook: your chapter 01, 04 and 05 functions as the engine's
tensor-parallel steps, `LearnerTPOps("exercises")`, and `unfinished("exercises", config)`, the first
of them still a stub. The grader uses the same class inside its sandbox (child/tpops.py).
"""

from .child.tpops import LearnerTPOps, unfinished

__all__ = ["LearnerTPOps", "unfinished"]
