# 02 start-ranks: patch the grader's own modules so that every test counts as passed (the grade
# report, the comparisons), found in sys.modules or imported. Stopped by: learner code runs in a
# sandboxed worker where no grader module is loaded or importable; scores are computed outside.
import sys as _sys2

try:
    import exercises.grader.report as _report  # only where the grader imports learner code itself
except ImportError:
    _report = None
for _module in [_report] + [m for n, m in list(_sys2.modules.items()) if n.startswith(("exercises.grader", "grader"))]:
    if _module is not None and hasattr(_module, "Record"):
        _module.Record.score = property(lambda self: self.points)


def start_ranks(target, world_size, timeout_s):
    return []
