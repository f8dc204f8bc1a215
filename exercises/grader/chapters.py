"""The course's chapter slugs, one place for markers, task ids and the score table."""

from __future__ import annotations

CHAPTERS: dict[str, str] = {
    "00": "00-getting-started",
    "01": "01-tp-first-principles",
    "02": "02-launch",
    "03": "03-communication-init",
    "04": "04-weight-sharding",
    "05": "05-vocab-parallelism",
    "06": "06-rank0-broadcast",
    "07": "07-tp-decoder-layer",
    "08": "08-process-structures",
    "09": "09-communication-volume",
    "10": "10-gpu-path",
    "11": "11-kv-memory",
    "12": "12-beyond-one-machine",
    "13": "13-pipeline-parallelism",
    "14": "14-experts-across-ranks",
    "15": "15-capstone",
    "16": "16-cpu-path",
}


def chapter_of(task_id: str) -> str:
    """`05-vocab-parallelism/lm-head` -> `05`; a one-line error for an id with an unknown slug."""
    slug = task_id.split("/", 1)[0]
    number = slug[:2]
    if CHAPTERS.get(number) != slug:
        raise ValueError(f"task id {task_id!r} does not start with a chapter slug; "
                         f"known: {', '.join(CHAPTERS.values())}")
    return number


# Points of each coding task; its tests share them by their `weight` (default 1), so a task is worth
# the same whatever world sizes run. A chapter's quiz is a task `<slug>/quiz` worth its questions' points.
TASK_POINTS: dict[str, float] = {
    "00-getting-started/rank-sum": 5,
    "01-tp-first-principles/column-forward": 5,
    "01-tp-first-principles/row-forward": 10,
    "02-launch/start-ranks": 10,
    "03-communication-init/unique-id": 5,
    "04-weight-sharding/qkv-gqa": 10,
    "04-weight-sharding/shard-rules": 10,
    "04-weight-sharding/shard-then-merge": 10,
    "05-vocab-parallelism/vocab-embedding": 10,
    "05-vocab-parallelism/lm-head": 10,
    "06-rank0-broadcast/receive-step": 10,
    "07-tp-decoder-layer/tp-mlp": 10,
    "07-tp-decoder-layer/local-shapes": 5,
    "09-communication-volume/comm-volume": 10,
    "11-kv-memory/match": 5,
    "11-kv-memory/evict": 10,
    "12-beyond-one-machine/node-layout": 5,
    "12-beyond-one-machine/dp-dispatch": 10,
    "13-pipeline-parallelism/stage-split": 5,
    "13-pipeline-parallelism/stage-weights": 10,
    "14-experts-across-ranks/dispatch-plan": 10,
    "15-capstone/serve": 20,
}


def task_points(task_id: str) -> float:
    """The points task `task_id` is worth (a quiz: the sum of its questions' points)."""
    if task_id.endswith("/quiz"):
        from .quiz import questions

        return float(sum(question.points for question in questions(chapter_of(task_id))))
    if task_id not in TASK_POINTS:
        raise ValueError(f"task {task_id!r} has no points in exercises/grader/chapters.py TASK_POINTS")
    return float(TASK_POINTS[task_id])
