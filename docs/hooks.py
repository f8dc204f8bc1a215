"""mkdocs hooks: put the course, which lives outside docs/, into the site without copying it.

- `on_files` adds chapters/NN-*/ (lesson, notebook, figures), exercises/README.md and the
  project README as pages. It runs before mkdocs-jupyter's `on_files`, which then renders the
  notebooks (unexecuted).
- `on_page_markdown` fixes the links that are relative to the repository rather than to the site:
  `../../docs/x.md` in a lesson, `../docs/x.md` in the exercises guide, `docs/x.md` in the README.
- `on_post_page` points a notebook's "lesson page" link (README.md next to it) at the lesson's URL.
"""

from __future__ import annotations

from pathlib import Path

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parent.parent
README_PAGE = "readme.md"  # the project README, as a page next to index.md


def _course_files() -> dict[str, Path]:
    """site path -> file in the repository."""
    files = {}
    for chapter in sorted(ROOT.glob("chapters/[0-9][0-9]-*")):
        for path in [chapter / "README.md", *chapter.glob("*.ipynb"), *chapter.glob("figures/*.png")]:
            if path.is_file():
                files[path.relative_to(ROOT).as_posix()] = path
    for extra in ("exercises/README.md", "exercises/CHANGELOG.md"):
        if (ROOT / extra).is_file():
            files[extra] = ROOT / extra
    if (ROOT / "README.md").is_file():
        files[README_PAGE] = ROOT / "README.md"
    return files


@event_priority(100)  # before mkdocs-jupyter turns .ipynb files into pages
def on_files(files: Files, config) -> Files:
    for src_uri, path in _course_files().items():
        # a plain File whose source dir is the repository (mkdocs-jupyter needs a real path)
        file = File(src_uri, src_dir=str(ROOT), dest_dir=config.site_dir, use_directory_urls=config.use_directory_urls)
        file.abs_src_path = str(path)  # differs from ROOT / src_uri for the README page only
        files.append(file)
    return files


def on_page_markdown(markdown: str, page, config, files) -> str:
    src = page.file.src_uri
    if src.startswith("chapters/"):
        return markdown.replace("](../../docs/", "](../../")
    if src.startswith("exercises/"):
        return markdown.replace("](../docs/", "](../")
    if src == README_PAGE:
        return markdown.replace("](docs/", "](")
    return markdown


def on_post_page(output: str, page, config) -> str:
    if page.file.src_uri.endswith(".ipynb"):
        return output.replace('href="README.md"', 'href="../"')
    return output
