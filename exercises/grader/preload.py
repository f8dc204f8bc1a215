"""Everything the grader's process imports, imported before any learner code runs (issue 41).

Where the learner's code runs as this same user (a laptop, `make grade`, a rehearsal without
`--sandbox-user`), it can write the course's files: a module the grader imported only later, when a
test first needed it, would run whatever had been written there, inside the grader. So at
collection - the tests' modules are imported by then - the grader imports the rest of itself and
each module it or a test imports inside a function, and later imports find them in `sys.modules`.
tests/test_redteam_scoring.py checks this list against the function-level imports of both.
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

GRADER = __name__.rpartition(".")[0]  # exercises.grader

# imported inside functions by the grader (sandbox.py, checks.py, ranks.py, conftest.py)
LATER = ("ctypes", "itertools", "psutil", "torch", "minisgl", "minisgl.utils", "minisgl.cpu.kernels",
         "minisgl.kvcache.radix_tree")
# imported inside the capstone's fixture (exercises/tests/test_ch15_capstone.py), when it is graded
CAPSTONE_LATER = ("transformers", "minisgl.testing.tiny_models")


def everything(capstone: bool) -> None:
    """Import every module of the grader and every module in LATER (and CAPSTONE_LATER)."""
    for module in pkgutil.walk_packages([str(Path(__file__).parent)], prefix=f"{GRADER}."):
        importlib.import_module(module.name)
    for name in LATER + (CAPSTONE_LATER if capstone else ()):
        importlib.import_module(name)
    if capstone:
        import transformers

        transformers.AutoModelForCausalLM  # noqa: B018 - transformers imports its model classes on first use
