"""The grader's side inside the sandbox: the code that runs in a child process next to the
learner's, with no keys, no reference answers, no expected values and no results path.

The grader stages this folder as the top-level package `grader_child` in the sandbox. A *zygote*
process imports torch once and forks one *worker* per rank of each task's pool; a worker imports
the learner's modules and a copy of minisgl whose functions that implement a course task raise
`OffLimits`, runs the jobs the grader sends, and sends back what the learner's functions returned
(data, see wire.py) with what it saw them do (collectives, inputs changed). The grader scores from
outside. Kept free of heavy imports at module level: spawned rank bodies (targets.py) import it.
"""
