"""Red team, quiz 00: an exit hook that rewrites the grade to full marks when the grader's process
ends. Stopped by: quiz files are parsed, never run."""
import atexit
import json
import sys


def _full_marks():
    path = sys.argv[sys.argv.index("--results") + 1]
    data = json.load(open(path))
    for test in data["tests"]:
        test["score"] = test["max_score"]
    data["score"] = data["extra_data"]["max_score"]
    json.dump(data, open(path, "w"))


atexit.register(_full_marks)
Q1 = "a"
