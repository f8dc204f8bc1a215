"""Import a Python file that no package holds (the docs hooks, a chapter script, the release tool) as a
module, so that a test can call its functions; `from file_modules import load_file_module`."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType


def load_file_module(path: Path, name: str) -> ModuleType:
    """Execute `path` as a fresh module called `name` (not added to sys.modules)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
