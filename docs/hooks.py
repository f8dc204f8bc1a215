"""mkdocs hooks: put the course, which lives outside docs/, into the site without copying it, in
English and in Chinese.

- `add_course_files` adds chapters/NN-*/ (lesson, its Chinese twin README.zh.md, notebook, figures),
  the exercises guide (and its twin) and changelog, and the project's README.md (and README.zh.md)
  and CONTRIBUTING.md as pages. The i18n plugin (mkdocs-static-i18n) only takes files under docs/
  as translatable, so they enter with a path under docs/; after the plugin has picked each
  language's pages, `restore_course_paths` points them back at the real files and hands the
  notebooks back to mkdocs-jupyter.
- A notebook page is rendered from the executed copy that `pytest chapters` wrote to build/notebooks/
  (chapters/conftest.py), so it shows outputs and figures; a missing or out-of-date copy is a
  warning, which fails `--strict`.
- The Chinese build (site/zh/) has the Chinese pages, English ones where no translation exists, and
  no notebook or API pages of its own: notebooks stay one set (in English), and a link to one from a
  Chinese page leads to the English page. `on_config` gives it the English navigation without them
  (the plugin's `nav_translations` then translate the titles). The other way, a link from an English
  page to a Chinese one (the README's to README.zh.md) leads to the Chinese build's page.
- `on_page_markdown` turns links written relative to the repository (so that they work when the
  Markdown is read on the repository host) into links relative to the site.
- `on_page_content` opens each notebook page with how to run it, a download link, and its lesson;
  `on_post_page` points the links across languages at the other build's page.
"""

from __future__ import annotations

import copy
import logging
import posixpath
import re
from pathlib import Path

import nbformat
from mkdocs.plugins import CombinedEvent, event_priority
from mkdocs.structure.files import File, Files, InclusionLevel

ROOT = Path(__file__).resolve().parent.parent
EXECUTED_DIR = ROOT / "build" / "notebooks"  # where chapters/conftest.py writes executed notebooks
TOP_LEVEL_PAGES = {  # site page -> repository file
    "readme.md": "README.md", "readme.zh.md": "README.zh.md", "contributing.md": "CONTRIBUTING.md"}
LINK = re.compile(r"\]\(([^)\s#]+)(#[^)\s]*)?\)")  # ](target#anchor) of a Markdown link or image
ZH = "zh"
log = logging.getLogger("mkdocs.hooks.minisgl")
_ENGLISH_NAV: list | None = None  # the navigation of mkdocs.yml, kept before the Chinese build edits it
_JUPYTER_CACHE: bool | None = None  # mkdocs-jupyter's cache setting, restored for the English build


def _course_files() -> dict[str, str]:
    """site path -> repository path (relative) of every page and image the hook adds."""
    files = {}
    for chapter in sorted(ROOT.glob("chapters/[0-9][0-9]-*")):
        pages = [chapter / "README.md", chapter / "README.zh.md", *chapter.glob("*.ipynb")]
        for path in [*pages, *chapter.glob("figures/*.png")]:
            if path.is_file():
                files[path.relative_to(ROOT).as_posix()] = path.relative_to(ROOT).as_posix()
    for extra in ("exercises/README.md", "exercises/README.zh.md", "exercises/CHANGELOG.md"):
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


def _language(config) -> str:
    i18n = config.plugins.get("i18n")
    return (i18n.current_language or i18n.default_language) if i18n else "en"


def on_config(config):
    """The Chinese build keeps the English navigation minus the notebook entries, and leaves
    mkdocs-jupyter's cache alone (it renders no notebook, so it would evict every cached one)."""
    global _ENGLISH_NAV, _JUPYTER_CACHE
    chinese = _language(config) == ZH
    if _ENGLISH_NAV is None:
        _ENGLISH_NAV = copy.deepcopy(config.nav)
    config.nav = _without_notebooks(_ENGLISH_NAV) if chinese else copy.deepcopy(_ENGLISH_NAV)
    jupyter = config.plugins.get("mkdocs-jupyter")
    if jupyter is not None:
        if _JUPYTER_CACHE is None:
            _JUPYTER_CACHE = jupyter.config["cache"]
        jupyter.config["cache"] = _JUPYTER_CACHE and not chinese
    return config


def _without_notebooks(nav: list) -> list:
    """The navigation without its notebook entries and API pages (the Chinese build renders neither)."""
    kept = []
    for item in nav:
        (title, value), = item.items() if isinstance(item, dict) else ((None, item),)
        if isinstance(value, list):
            if title != "API reference":
                kept.append({title: _without_notebooks(value)})
        elif not str(value).endswith(".ipynb") and not str(value).startswith("api/"):
            kept.append(item)
    return kept


@event_priority(100)  # before mkdocs-jupyter turns .ipynb files into pages, and before the i18n plugin
def add_course_files(files: Files, config) -> Files:
    chinese = _language(config) == ZH
    for src_uri in COURSE_FILES:
        if chinese and src_uri.endswith(".ipynb"):
            continue  # notebooks are one set: see english_only_pages
        # under docs/ for the i18n plugin; restore_course_paths points it at the real file
        files.append(File(src_uri, src_dir=config.docs_dir, dest_dir=config.site_dir,
                          use_directory_urls=config.use_directory_urls))
    return files


@event_priority(-200)  # after the i18n plugin (-100) has chosen each page's language
def restore_course_paths(files: Files, config) -> Files:
    for file in files:
        repo_path = COURSE_FILES.get(file.src_uri)
        if repo_path is not None:
            src_dir = _notebook_source_dir(repo_path) if repo_path.endswith(".ipynb") else ROOT
            file.src_dir = str(src_dir)  # a notebook's page (mkdocs-jupyter's wrapper) reads src_dir / src_uri
            file.abs_src_path = str(src_dir / repo_path)  # differs from src_dir / src_uri for README and CONTRIBUTING
    if _language(config) == ZH:
        return english_only_pages(files, config)
    chinese_only_pages(files, config)
    jupyter = config.plugins.get("mkdocs-jupyter")  # the i18n plugin replaced its notebook pages by plain files
    return jupyter.on_files(files, config) if jupyter else files


def chinese_only_pages(files: Files, config) -> None:
    """The English build renders no Chinese page: a link to one (the README's to README.zh.md) leads to
    the Chinese build's page. Each becomes an excluded file (never written) at that page's URL, so the
    link resolves there and the strict build accepts it."""
    for src_uri in COURSE_FILES:
        if not src_uri.endswith(".zh.md") or files.get_file_from_path(src_uri) is not None:
            continue
        english = files.get_file_from_path(src_uri.removesuffix(".zh.md") + ".md")
        if english is None:
            continue
        files.append(File(src_uri, src_dir=config.docs_dir, dest_dir=config.site_dir,
                          use_directory_urls=config.use_directory_urls, dest_uri=f"{ZH}/{english.dest_uri}",
                          inclusion=InclusionLevel.EXCLUDED))


def english_only_pages(files: Files, config) -> Files:
    """The Chinese build renders no notebook and no API page: links to them lead to the English pages.

    Each becomes an excluded file (never written) whose URL is the English page's, so a link from a
    Chinese page resolves to it and the strict build accepts it."""
    api = [f for f in files if f.src_uri.startswith("api/")]
    for file in api:
        files.remove(file)  # in place: the plugin's Files finds index.zh.md for index.md
    english = [uri for uri in COURSE_FILES if uri.endswith(".ipynb")] + [f.src_uri for f in api]
    for src_uri in english:
        page = Path(src_uri).with_suffix("").as_posix()
        dest = f"{page}/index.html" if config.use_directory_urls and not page.endswith("/index") else f"{page}.html"
        files.append(File(src_uri, src_dir=config.docs_dir, dest_dir=config.site_dir,
                          use_directory_urls=config.use_directory_urls, dest_uri=dest,
                          inclusion=InclusionLevel.EXCLUDED))
    return files


on_files = CombinedEvent(add_course_files, restore_course_paths)


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
    html = html.replace('href="README.md"', f'href="{lesson}"')  # the notebook's own lesson links
    # its markdown cells embed figures/NAME.png from the chapter's folder, one level above the page's URL
    return box + html.replace('src="figures/', 'src="../figures/')


HEAD_ALTERNATE = re.compile(r'<link rel="alternate" href="[^"]*" hreflang="[^"]*">\s*')


def on_post_page(output: str, page, config) -> str:
    """Links to the other language's page, which only the other build has: a notebook's, and the language
    menu's on its page, to its chapter's Chinese page (notebooks are English only).

    The head's `<link rel="alternate" hreflang>` tags go: the theme's script takes each for a language's
    root and fetches a sitemap under it, which under a page's URL is a 404 on every page (an error in
    the browser's console); the language menu's own links already lead to the same page."""
    output = HEAD_ALTERNATE.sub("", output)
    if page.file.src_uri.endswith(".ipynb"):
        chapter, notebook = Path(page.file.src_uri).parent.as_posix(), Path(page.file.src_uri).stem
        lesson = f'href="../../../{ZH}/{chapter}/"'
        output = output.replace(f'href="../../../{ZH}/{chapter}/{notebook}/"', lesson)  # the language menu's
        return output.replace('href="README.zh.md"', lesson)
    return output
