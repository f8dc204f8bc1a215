"""The course chapters: every lesson has its notebook, generated from it and stored unexecuted, with
the sections, hardware note, exercises pointer and figures a chapter promises.

These checks are fast and static. Executing the notebooks is `pytest chapters` (chapters/conftest.py,
`make test-notebooks`), which takes a few minutes and writes the executed copies the site renders.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from file_modules import load_file_module

CHAPTERS = Path(__file__).resolve().parent.parent / "chapters"
SECTIONS = ["## Objectives", "## Run it", "## Summary", "## Exercises", "## References"]


builder = load_file_module(CHAPTERS / "build_notebooks.py", "build_notebooks")
chapter_dirs = builder.chapter_dirs()


def test_the_chapters_exist():
    # 00-11, then the capstone as 15: 12-14 are kept for chapters to come
    numbers = [c.name[:2] for c in chapter_dirs]
    assert numbers == sorted(set(numbers))
    assert {f"{n:02d}" for n in range(12)} | {"15"} <= set(numbers)


@pytest.mark.parametrize("chapter", chapter_dirs, ids=lambda c: c.name)
def test_notebook_is_generated_from_the_lesson(chapter: Path):
    notebook = builder.notebook_path(chapter)
    assert notebook.is_file(), f"{notebook.name} missing: run `make notebooks`"
    assert notebook.read_text() == builder.render(builder.build_notebook(chapter)), (
        f"{notebook.name} is out of date with its README.md: run `make notebooks`"
    )


@pytest.mark.parametrize("chapter", chapter_dirs, ids=lambda c: c.name)
def test_notebook_is_stored_unexecuted(chapter: Path):
    nb = nbformat.read(builder.notebook_path(chapter), as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, "clear the outputs: run `make notebooks`"


@pytest.mark.parametrize("chapter", chapter_dirs, ids=lambda c: c.name)
def test_lesson_has_the_chapter_anatomy(chapter: Path):
    lesson = (chapter / "README.md").read_text()
    positions = [lesson.find(section + "\n") for section in SECTIONS]
    assert all(p >= 0 for p in positions), f"missing sections: {[s for s, p in zip(SECTIONS, positions) if p < 0]}"
    assert positions == sorted(positions), "sections out of order"
    head = lesson.split("\n## ", 1)[0]
    assert "**Hardware.**" in head and "**On GPUs.**" in head, \
        "the top must say what hardware it needs and what changes on GPUs"
    exercises = lesson.split("## Exercises\n", 1)[1].split("\n## ", 1)[0]
    assert f"pytest exercises -m ch{chapter.name[:2]}" in exercises


@pytest.mark.parametrize("chapter", chapter_dirs, ids=lambda c: c.name)
def test_every_pictured_figure_is_drawn_by_the_notebook(chapter: Path):
    lesson = (chapter / "README.md").read_text()
    pictured = re.findall(r"!\[[^\]]*\]\(figures/([\w-]+)\.png\)", lesson)
    code = "\n".join(c.source for c in nbformat.read(builder.notebook_path(chapter), 4).cells if c.cell_type == "code")
    for name in pictured:
        assert (chapter / "figures" / f"{name}.png").is_file(), f"figures/{name}.png missing: run `make figures`"
        assert f'save_figure(fig, "{name}")' in code, f"no notebook cell draws {name}"
    undrawn = [p.name for p in (chapter / "figures").glob("*.png") if f'save_figure(fig, "{p.stem}")' not in code]
    assert not undrawn, f"{chapter.name}/figures/{undrawn}: no notebook cell draws them for `make figures`"


def test_the_course_has_at_least_six_figures():
    assert len(list(CHAPTERS.glob("*/figures/*.png"))) >= 6


@pytest.mark.parametrize("chapter", [c for c in chapter_dirs if (c / "workers.py").is_file()], ids=lambda c: c.name)
def test_rank_workers_import(chapter: Path, monkeypatch: pytest.MonkeyPatch):
    """Spawned ranks import workers.py by name; a broken import would only show up inside a rank."""
    monkeypatch.syspath_prepend(str(CHAPTERS))
    load_file_module(chapter / "workers.py", f"workers_{chapter.name[:2]}")
