"""The course on the site: every chapter has a lesson and a notebook in the nav and on the home page,
and a notebook page is rendered from the executed copy (outputs and figures) with a box saying how to
run it. docs/hooks.py does the rendering; `mkdocs build --strict` fails on the warnings tested here.
A new chapter needs only its folder, its nav entries and its home-page row: the rest is automatic.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from mkdocs.structure.files import File, Files
from mkdocs_jupyter.plugin import NotebookFile

from file_modules import load_file_module

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = sorted(p for p in ROOT.glob("chapters/[0-9][0-9]-*") if (p / "README.md").is_file())


hooks = load_file_module(ROOT / "docs" / "hooks.py", "minisgl_docs_hooks")


def _nav_pages(entries: list) -> list[tuple[str, str]]:
    """(title, page) of every page of mkdocs.yml's nav, depth first."""
    found = []
    for entry in entries:
        for title, value in (entry.items() if isinstance(entry, dict) else [(None, entry)]):
            found += _nav_pages(value) if isinstance(value, list) else [(title, value)]
    return found


NAV = _nav_pages(yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"])


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda c: c.name)
def test_each_chapter_has_a_lesson_and_a_notebook_in_the_nav(chapter: Path) -> None:
    folder = chapter.relative_to(ROOT).as_posix()
    for title, page in [("Lesson", f"{folder}/README.md"), ("Notebook", f"{folder}/{chapter.name}.ipynb")]:
        assert (title, page) in NAV, f"mkdocs.yml's nav lacks `- {title}: {page}` under {chapter.name}"


def test_nav_entries_of_notebooks_say_notebook() -> None:
    misnamed = [(title, page) for title, page in NAV if page.endswith(".ipynb") and title != "Notebook"]
    assert not misnamed, f"notebook pages are called `Notebook` in mkdocs.yml's nav: {misnamed}"


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda c: c.name)
def test_the_home_page_links_each_lesson_and_notebook(chapter: Path) -> None:
    home = (ROOT / "docs" / "index.md").read_text()
    row = next((line for line in home.splitlines() if line.startswith(f"| {chapter.name[:2]} |")), None)
    assert row, f"docs/index.md has no row `| {chapter.name[:2]} | ...` in its table of chapters"
    for target in ("README.md", f"{chapter.name}.ipynb"):
        assert f"](../chapters/{chapter.name}/{target})" in row, \
            f"docs/index.md's row for {chapter.name} lacks a link to ../chapters/{chapter.name}/{target}"


@pytest.fixture
def executed_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(hooks, "EXECUTED_DIR", tmp_path)
    return tmp_path


NOTEBOOK = f"chapters/{CHAPTERS[0].name}/{CHAPTERS[0].name}.ipynb"


def test_a_notebook_page_renders_its_executed_copy(executed_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    (executed_dir / NOTEBOOK).parent.mkdir(parents=True)
    shutil.copy(ROOT / NOTEBOOK, executed_dir / NOTEBOOK)  # same cells: up to date
    with caplog.at_level(logging.WARNING):
        assert hooks._notebook_source_dir(NOTEBOOK) == executed_dir
    assert not caplog.records


def test_a_missing_or_stale_executed_copy_is_a_warning(executed_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        assert hooks._notebook_source_dir(NOTEBOOK) == ROOT  # never executed
    assert "has never been executed" in caplog.text and "make test-notebooks" in caplog.text
    caplog.clear()
    (executed_dir / NOTEBOOK).parent.mkdir(parents=True)
    text = (ROOT / NOTEBOOK).read_text()
    (executed_dir / NOTEBOOK).write_text(text.replace('"source": [', '"source": [\n    "# an older cell\\n",', 1))
    with caplog.at_level(logging.WARNING):
        assert hooks._notebook_source_dir(NOTEBOOK) == ROOT
    assert "changed since it was last executed" in caplog.text


def test_a_notebook_page_says_how_to_run_it_and_links_its_lesson_and_a_download() -> None:
    def file(path: str, src_dir: Path) -> File:
        return File(path, src_dir=str(src_dir), dest_dir="/site", use_directory_urls=True)

    folder = NOTEBOOK.rsplit("/", 1)[0]
    # a notebook's page, as mkdocs-jupyter makes it: chapters/NN-x/NN-x/ on the site
    notebook = NotebookFile(file(NOTEBOOK, ROOT), use_directory_urls=True, site_dir="/site")
    files = Files([file(f"{folder}/README.md", ROOT), notebook, file("prerequisites.md", ROOT / "docs")])
    page = SimpleNamespace(file=files.get_file_from_path(NOTEBOOK))
    html = hooks.on_page_content('<p>the <a href="README.md">lesson page</a></p><img src="figures/ch.png"/>', page,
                                 None, files)
    assert '<img src="../figures/ch.png"/>' in html  # the chapter's figure, one level above the page's URL
    name = NOTEBOOK.rsplit("/", 1)[1]
    assert f'<a href="{name}" download>' in html  # mkdocs-jupyter's include_source puts the file there
    assert f"jupyter lab {NOTEBOOK}" in html
    assert 'href="../../../prerequisites/"' in html
    assert 'href="README.md"' not in html and html.count('href="../"') == 2  # both lesson links are the page's URL


def test_an_english_page_links_a_chinese_one_in_the_chinese_build() -> None:
    """The README's link to README.zh.md: the English build has no Chinese page, so the link resolves to
    an excluded file at the Chinese build's URL (a link to a missing page is a strict-mode warning)."""
    readme = File("readme.md", src_dir=str(ROOT / "docs"), dest_dir="/site", use_directory_urls=True)
    files = Files([readme])
    hooks.chinese_only_pages(files, SimpleNamespace(docs_dir=str(ROOT / "docs"), site_dir="/site",
                                                    use_directory_urls=True))
    chinese = files.get_file_from_path("readme.zh.md")
    assert chinese is not None and chinese.url_relative_to(readme) == "../zh/readme/"
    assert chinese.inclusion.is_excluded()  # never written by the English build


def test_every_strict_build_counts_warnings() -> None:
    """`--quiet` drops warnings before strict mode counts them: a strict build with it passes anyway."""
    builds = [line for line in (ROOT / "Makefile").read_text().splitlines() if "mkdocs build" in line]
    assert builds, "the Makefile builds the site"
    for line in builds:
        assert "--strict" in line and "--quiet" not in line and " -q" not in line, line
