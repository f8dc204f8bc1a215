"""`pytest chapters` runs every chapter notebook once, and that one run serves twice: it checks the
notebook (the first cell that raises fails the test, naming the notebook, the cell and the lesson
section it comes from) and it writes the executed copy, outputs and figures included, to
build/notebooks/chapters/NN-*/, which the site renders (docs/hooks.py). The notebooks stored in git stay
output-free (chapters/build_notebooks.py writes them from the lessons).

Each notebook runs in its own Jupyter kernel from its chapter folder, as a learner's Jupyter would,
with a time limit per cell (the notebook's `metadata.execution.timeout`) and per notebook.
`MINISGL_WRITE_FIGURES=1` (`make figures`) also redraws the figures the lesson pages embed.
CONTRIBUTING.md says how the course is built.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellControlSignal, CellExecutionError, DeadKernelError

ROOT = Path(__file__).resolve().parent.parent
EXECUTED_DIR = ROOT / "build" / "notebooks"
NOTEBOOK_TIMEOUT_S = 900  # a whole notebook, on a loaded 2-core machine; each cell has its own limit too
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")


def executed_path(notebook: Path) -> Path:
    """Where the executed copy of chapters/NN-x/NN-x.ipynb goes: build/notebooks/chapters/NN-x/NN-x.ipynb."""
    return EXECUTED_DIR / notebook.relative_to(ROOT)


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    chapter = file_path.parent
    if file_path.suffix == ".ipynb" and re.match(r"\d\d-", chapter.name) and file_path.stem == chapter.name:
        return ChapterNotebook.from_parent(parent, path=file_path)
    return None


class ChapterNotebook(pytest.File):
    def collect(self):
        yield NotebookRun.from_parent(self, name="run")


class NotebookFailed(Exception):
    """A cell raised or timed out; the message is the whole report."""


class NotebookRun(pytest.Item):
    """Execute one chapter notebook; on success write the executed copy for the site."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.add_marker(pytest.mark.timeout(NOTEBOOK_TIMEOUT_S))

    def runtest(self) -> None:
        out = executed_path(self.path)
        out.unlink(missing_ok=True)  # a failed run must not leave an older copy for the site to show
        nb = nbformat.read(self.path, as_version=4)
        running = {"index": 0}
        client = NotebookClient(
            nb, timeout=nb.metadata.execution.timeout, kernel_name="python3",
            resources={"metadata": {"path": str(self.path.parent)}},
            on_cell_execute=lambda cell, cell_index: running.update(index=cell_index),
        )
        try:
            client.execute()
        except (CellControlSignal, DeadKernelError) as error:  # a cell raised, timed out, or killed the kernel
            raise NotebookFailed(failure_report(self.path, nb, running["index"], error)) from None
        out.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, out)

    def repr_failure(self, excinfo: pytest.ExceptionInfo, style=None):
        if isinstance(excinfo.value, NotebookFailed):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style)

    def reportinfo(self) -> tuple[Path, None, str]:
        return self.path, None, f"notebook {self.path.name}"


def failure_report(notebook: Path, nb: nbformat.NotebookNode, index: int, error: Exception) -> str:
    """What failed first, then the cell and the whole error: readable without opening Jupyter."""
    cell = nb.cells[index]
    headings = [line for c in nb.cells[:index] if c.cell_type == "markdown"
                for line in c.source.splitlines() if line.startswith("#")]
    where = f'cell {index} (under "{headings[-1].lstrip("# ")}")' if headings else f"cell {index}"
    if isinstance(error, CellExecutionError):
        errors = [o for o in cell.get("outputs", []) if o.output_type == "error"]
        summary = f"{error.ename}: {error.evalue}"
        detail = ANSI_ESCAPE.sub("", "\n".join(errors[-1].traceback) if errors else str(error)).strip()
    else:  # a timeout or a dead kernel: the first line says which
        summary, detail = f"{type(error).__name__}: {str(error).strip().splitlines()[0]}", ""
    source = "\n".join("    " + line for line in cell.source.splitlines())
    lesson = notebook.parent.relative_to(ROOT) / "README.md"
    parts = [f"{where} failed: {summary}", source, detail, f"The cell comes from the `## Run it` section of {lesson}."]
    return "\n\n".join(part for part in parts if part)
