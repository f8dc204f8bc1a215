"""mkdocs hooks: put the course, which lives outside docs/, into the site without copying it.

- `on_files` adds chapters/NN-*/ (lesson, notebook, figures), the exercises guide and changelog,
  and the project's README.md and CONTRIBUTING.md as pages. A notebook page is rendered from the
  executed copy that `pytest chapters` wrote to build/notebooks/ (chapters/conftest.py), so it
  shows outputs and figures; a missing or out-of-date copy is a warning, which fails `--strict`.
- `on_page_markdown` turns links written relative to the repository (so that they work when the
  Markdown is read on the repository host) into links relative to the site.
- `on_page_content` opens each notebook page with how to run it, a download link, and its lesson.
"""

from __future__ import annotations

import logging
import posixpath
import re
from pathlib import Path

import nbformat
from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parent.parent
EXECUTED_DIR = ROOT / "build" / "notebooks"  # where chapters/conftest.py writes executed notebooks
TOP_LEVEL_PAGES = {"readme.md": "README.md", "contributing.md": "CONTRIBUTING.md"}  # site page -> repo file
LINK = re.compile(r"\]\(([^)\s#]+)(#[^)\s]*)?\)")  # ](target#anchor) of a Markdown link or image
log = logging.getLogger("mkdocs.hooks.minisgl")


def _course_files() -> dict[str, str]:
    """site path -> repository path (relative) of every page and image the hook adds."""
    files = {}
    for chapter in sorted(ROOT.glob("chapters/[0-9][0-9]-*")):
        for path in [chapter / "README.md", *chapter.glob("*.ipynb"), *chapter.glob("figures/*.png")]:
            if path.is_file():
                files[path.relative_to(ROOT).as_posix()] = path.relative_to(ROOT).as_posix()
    for extra in ("exercises/README.md", "exercises/CHANGELOG.md"):
        if (ROOT / extra).is_file():
            files[extra] = extra
    files.update({page: repo for page, repo in TOP_LEVEL_PAGES.items() if (ROOT / repo).is_file()})
    return files


COURSE_FILES = _course_files()
SITE_PATH_OF = {repo: site for site, repo in COURSE_FILES.items()}


def _notebook_source_dir(notebook: str) -> Path:
    """Where to read the notebook `chapters/NN-x/NN-x.ipynb` from: build/notebooks/ if its executed copy
    is there and up to date, else the repository (with a warning: the page would show no outputs)."""
    executed = EXECUTED_DIR / notebook
    run = "run `make test-notebooks` (it executes the notebooks into build/notebooks/)"
    if not executed.is_file():
        log.warning(f"{notebook} has never been executed, its page would show no outputs: {run}")
        return ROOT
    cells = [(c.cell_type, c.source) for c in nbformat.read(ROOT / notebook, 4).cells]
    if cells != [(c.cell_type, c.source) for c in nbformat.read(executed, 4).cells]:
        log.warning(f"{notebook} changed since it was last executed: {run}")
        return ROOT
    return EXECUTED_DIR


@event_priority(100)  # before mkdocs-jupyter turns .ipynb files into pages
def on_files(files: Files, config) -> Files:
    for site_path, repo_path in COURSE_FILES.items():
        # a plain File on a real path (mkdocs-jupyter reads src_dir / src_uri, so that path decides)
        src_dir = _notebook_source_dir(repo_path) if repo_path.endswith(".ipynb") else ROOT
        file = File(site_path, src_dir=str(src_dir), dest_dir=config.site_dir,
                    use_directory_urls=config.use_directory_urls)
        file.abs_src_path = str(src_dir / repo_path)  # differs from src_dir / site_path for README and CONTRIBUTING
        files.append(file)
    return files


def _repo_path(site_path: str) -> str:
    """Where the page with this site path lives in the repository."""
    return COURSE_FILES.get(site_path, f"docs/{site_path}")


def _site_link(target: str, page_site_path: str) -> str:
    """A link written relative to the page's place in the repository, relative to its place on the site."""
    if ":" in target or target.startswith("/"):
        return target  # a URL, or absolute: not ours
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(_repo_path(page_site_path)), target))
    site = resolved.removeprefix("docs/") if resolved.startswith("docs/") else SITE_PATH_OF.get(resolved)
    if site is None:
        return target  # not published on the site: mkdocs reports it
    return posixpath.relpath(site, posixpath.dirname(page_site_path) or ".")


def on_page_markdown(markdown: str, page, config, files) -> str:
    src = page.file.src_uri
    if src.endswith(".ipynb"):
        return markdown  # rendered by mkdocs-jupyter from the notebook, not from this text
    return LINK.sub(lambda m: f"]({_site_link(m[1], src)}{m[2] or ''})", markdown)


def on_page_content(html: str, page, config, files: Files) -> str:
    if not page.file.src_uri.endswith(".ipynb"):
        return html
    notebook = page.file.src_uri  # chapters/NN-x/NN-x.ipynb
    folder, name = posixpath.split(notebook)
    lesson = files.get_file_from_path(f"{folder}/README.md").url_relative_to(page.file)
    prerequisites = files.get_file_from_path("prerequisites.md").url_relative_to(page.file)
    box = (
        '<div class="admonition tip"><p class="admonition-title">Run it yourself</p>'
        "<p>This page shows the notebook with the outputs of its last run in CI (timings differ from "
        "machine to machine). To run it, clone the repository, run <code>make install</code> (see "
        f'<a href="{prerequisites}">Before you start</a>), then '
        f"<code>.venv/bin/jupyter lab {notebook}</code>. It imports <code>chapters/course.py</code> and "
        f'its chapter\'s helpers, so a <a href="{name}" download>downloaded copy</a> runs only from '
        f"<code>{folder}/</code> in the repository. The explanations, summary and exercises are on the "
        f'<a href="{lesson}">lesson page</a>.</p></div>'
    )
    return box + html.replace('href="README.md"', f'href="{lesson}"')  # the notebook's own lesson links
