"""chapters/conftest.py, the runner of the chapter notebooks: a notebook that runs writes its executed
copy (outputs included) for the site; one whose cell raises fails with a message naming the cell, its
section, the error and the lesson, and leaves no copy behind. Runs pytest on two made-up chapters."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent


def _write_chapter(chapters: Path, name: str, cells: list) -> Path:
    folder = chapters / name
    folder.mkdir(parents=True)
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata["execution"] = {"timeout": 60}
    nbformat.write(nb, folder / f"{name}.ipynb")
    return folder / f"{name}.ipynb"


@pytest.mark.timeout(240)
def test_a_notebook_runs_once_into_its_executed_copy_or_fails_readably(tmp_path: Path) -> None:
    chapters = tmp_path / "chapters"
    chapters.mkdir()
    shutil.copy(ROOT / "chapters" / "conftest.py", chapters / "conftest.py")
    md, code = nbformat.v4.new_markdown_cell, nbformat.v4.new_code_cell
    _write_chapter(chapters, "98-fine", [md("# Fine"), code("print(6 * 7)")])
    _write_chapter(chapters, "99-broken", [md("# Broken\n\n### Divide"), code("x = 1"), code("x / 0")])
    stale = tmp_path / "build/notebooks/chapters/99-broken/99-broken.ipynb"
    stale.parent.mkdir(parents=True)
    stale.write_text("an executed copy from an older run")

    run = subprocess.run([sys.executable, "-m", "pytest", "chapters", "-q", "-p", "no:cacheprovider"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=200)

    assert "1 failed, 1 passed" in run.stdout, run.stdout + run.stderr
    executed = nbformat.read(tmp_path / "build/notebooks/chapters/98-fine/98-fine.ipynb", as_version=4)
    assert executed.cells[1].outputs[0].text == "42\n"
    assert 'cell 2 (under "Divide") failed: ZeroDivisionError: division by zero' in run.stdout
    assert "    x / 0" in run.stdout and "chapters/99-broken/README.md" in run.stdout
    assert not stale.exists()  # the site must not show an older run of a notebook that now fails
