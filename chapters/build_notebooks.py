"""Build each chapter's notebook from its lesson page, so the two never drift apart.

A chapter's README.md is the single source. Its title and hardware note become the first cell,
with a link to the chapter's Chinese page (README.zh.md) where it has one;
its `## Run it` section becomes the rest: every ```python fence is a code cell, the prose between
fences markdown cells. Code quoted elsewhere in the lesson is never executed. Notebooks are
written unexecuted, with fixed cell ids, so regenerating an unchanged lesson changes no byte;
`pytest chapters` (chapters/conftest.py) executes them into build/notebooks/ for the site.

    python chapters/build_notebooks.py           # rewrite every chapters/NN-*/NN-*.ipynb
    python chapters/build_notebooks.py 04 05     # only chapters 04 and 05
    python chapters/build_notebooks.py --check   # exit 1 if a notebook is out of date
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import nbformat

CHAPTERS_DIR = Path(__file__).resolve().parent
RUN_HEADING = "## Run it"
CELL_TIMEOUT_S = 180  # chapters/conftest.py reads metadata.execution.timeout: no cell may hang CI
FENCE = re.compile(r"^```python\n(.*?)^```\n", re.MULTILINE | re.DOTALL)


def chapter_dirs() -> list[Path]:
    return sorted(p for p in CHAPTERS_DIR.iterdir() if p.is_dir() and re.match(r"\d\d-", p.name))


def notebook_path(chapter: Path) -> Path:
    return chapter / f"{chapter.name}.ipynb"


def _sections(lesson: str) -> tuple[str, str]:
    """(title + text before the first `## ` heading, body of the `## Run it` section)."""
    head, _, _ = lesson.partition("\n## ")
    start = lesson.find(f"\n{RUN_HEADING}\n")
    if start < 0:
        raise ValueError(f"the lesson has no '{RUN_HEADING}' section")
    body = lesson[start + len(RUN_HEADING) + 2 :]
    end = body.find("\n## ")
    return head.strip(), (body if end < 0 else body[: end + 1])


def build_notebook(chapter: Path) -> nbformat.NotebookNode:
    head, run = _sections((chapter / "README.md").read_text())
    # one set of notebooks, in English; a chapter's Chinese page is linked from the first cell
    chinese = " ([中文讲义](README.zh.md))" if (chapter / "README.zh.md").is_file() else ""
    cells = [
        nbformat.v4.new_markdown_cell(
            head + f"\n\n*This notebook is the runnable part of the chapter's [lesson page](README.md){chinese}, "
            "which has the explanations, the summary and the exercises.*"
        )
    ]
    position = 0
    for fence in FENCE.finditer(run):
        prose = run[position : fence.start()].strip()
        if prose:
            cells.append(nbformat.v4.new_markdown_cell(prose))
        cells.append(nbformat.v4.new_code_cell(fence.group(1).rstrip("\n")))
        position = fence.end()
    tail = run[position:].strip()
    if tail:
        cells.append(nbformat.v4.new_markdown_cell(tail))
    cells.append(
        nbformat.v4.new_markdown_cell(
            "That is the end of the runnable part. The [lesson page](README.md) has the summary, "
            "the exercises for this chapter and the references."
        )
    )
    for index, cell in enumerate(cells):
        cell["id"] = f"{chapter.name[:2]}-{index:02d}"  # stable ids: clean diffs
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata = {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
        "execution": {"timeout": CELL_TIMEOUT_S},
    }
    return nb


def render(nb: nbformat.NotebookNode) -> str:
    return nbformat.writes(nb) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("chapters", nargs="*", help="chapter numbers (default: all), e.g. 04")
    parser.add_argument("--check", action="store_true", help="only report notebooks that are out of date")
    args = parser.parse_args()
    stale = []
    for chapter in chapter_dirs():
        if args.chapters and chapter.name[:2] not in args.chapters:
            continue
        text = render(build_notebook(chapter))
        path = notebook_path(chapter)
        if path.is_file() and path.read_text() == text:
            continue
        stale.append(path)
        if not args.check:
            path.write_text(text)
            print(f"wrote {path.relative_to(CHAPTERS_DIR.parent)}")
    if args.check and stale:
        print("out of date (run `make notebooks`): " + ", ".join(p.name for p in stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
