"""The test suite's own layout. tests/ and tests/gpu/ are not packages, so pytest imports each test
file by its base name: a second file with the same name fails collection (and a module imported by
name, such as a shared constant, may come from the wrong one)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def test_every_test_file_name_is_unique() -> None:
    names = Counter(path.name for path in TESTS.rglob("test_*.py"))
    repeated = sorted(name for name, count in names.items() if count > 1)
    assert not repeated, f"test files share a name (rename the GPU one, e.g. test_x_gpu.py): {repeated}"
