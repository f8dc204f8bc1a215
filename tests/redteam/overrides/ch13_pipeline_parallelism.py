# 13 stage-split: write into the grader's tree - the quiz key of chapter 13 (made to match this
# submission's wrong answers), and the grade report - wherever an ancestor works. Stopped by: keys
# and grader modules are read before any learner code runs; with a sandbox user, nothing there is
# writable at all. 13 stage-weights: hunt the environment and the ancestors' command lines for
# paths (results, keys) and write there. Stopped by: workers get a clean environment; the results
# file is written last, by the grader alone (and, with a sandbox user, in a folder it cannot write).
import json as _json13
import os as _os13

WRONG_KEYS_13 = "{wrong_keys_13}"  # the test puts here a key file matching this submission's answers


def split_layers(num_layers, pp_size):
    for root in _course_roots():
        for relative, text in (("solutions/quizzes/ch13.py", WRONG_KEYS_13),
                               ("exercises/grader/report.py", "raise SystemExit('red team')\n")):
            try:
                with open(_os13.path.join(root, relative), "w") as f:
                    f.write(text)
                with open(_os13.path.join(MARK, "wrote-grader-tree"), "a") as note:
                    note.write(f"{root}/{relative}\n")
            except OSError:
                pass
    return []


def stages_holding(name, num_layers, pp_size, tie_word_embeddings):
    found = {key: value for key, value in _os13.environ.items() if "/" in value}
    for path in _results_paths():
        _full_marks(path)
        found["results"] = path
    with open(_os13.path.join(MARK, "found-paths"), "w") as note:
        note.write(_json13.dumps(found))
    return []
