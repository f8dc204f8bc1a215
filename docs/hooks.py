"""mkdocs hooks: put the course, which lives outside docs/, into the site without copying it, in
English and in Chinese.

- `add_course_files` adds chapters/NN-*/ (lesson, its Chinese twin README.zh.md, notebook, figures),
  exercises/README(.zh).md and the project README (and README.zh.md) as pages. The i18n plugin
  (mkdocs-static-i18n) only takes files under docs/ as translatable, so they enter with a path under
  docs/; after the plugin has picked each language's files, `restore_course_paths` points them back
  at the real files and hands the notebooks back to mkdocs-jupyter.
- The Chinese build (site/zh/) has the Chinese pages, English ones where no translation exists, and
  no notebook or API pages of its own: notebooks stay one set (in English), and a link to one from a
  Chinese page leads to the English notebook page.
- `on_config` gives the Chinese build the English navigation without its notebook entries (the
  plugin's `nav_translations` then translate the titles).
- `on_page_markdown` fixes the links that are relative to the repository rather than to the site:
  `../../docs/x.md` in a lesson, `../docs/x.md` in the exercises guide, `docs/x.md` in the README.
- `on_post_page` points a notebook's "lesson page" links (README.md and README.zh.md next to it) and
  the README's link to its Chinese version at their pages.
"""

from __future__ import annotations

import copy
from pathlib import Path

from mkdocs.plugins import CombinedEvent, event_priority
from mkdocs.structure.files import File, Files, InclusionLevel

ROOT = Path(__file__).resolve().parent.parent
README_PAGE = "readme.md"  # the project README, as a page next to index.md
ZH = "zh"
_ENGLISH_NAV: list | None = None  # the navigation of mkdocs.yml, kept before the Chinese build edits it
_JUPYTER_CACHE: bool | None = None  # mkdocs-jupyter's cache setting, restored for the English build


def _course_files() -> dict[str, Path]:
    """site path -> file in the repository."""
    files = {}
    for chapter in sorted(ROOT.glob("chapters/[0-9][0-9]-*")):
        pages = [chapter / "README.md", chapter / "README.zh.md", *chapter.glob("*.ipynb")]
        for path in [*pages, *chapter.glob("figures/*.png")]:
            if path.is_file():
                files[path.relative_to(ROOT).as_posix()] = path
    for extra in ("exercises/README.md", "exercises/README.zh.md", "exercises/CHANGELOG.md"):
        if (ROOT / extra).is_file():
            files[extra] = ROOT / extra
    for readme, page in (("README.md", README_PAGE), ("README.zh.md", "readme.zh.md")):
        if (ROOT / readme).is_file():
            files[page] = ROOT / readme
    return files


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
    for src_uri in _course_files():
        if chinese and src_uri.endswith(".ipynb"):
            continue  # notebooks are one set: see english_only_pages
        # under docs/ for the i18n plugin; restore_course_paths points it at the real file
        files.append(File(src_uri, src_dir=config.docs_dir, dest_dir=config.site_dir,
                          use_directory_urls=config.use_directory_urls))
    return files


@event_priority(-200)  # after the i18n plugin (-100) has chosen each page's language
def restore_course_paths(files: Files, config) -> Files:
    course = _course_files()
    for file in files:
        if file.src_uri in course:
            file.src_dir = str(ROOT)  # a notebook's page (mkdocs-jupyter's wrapper) derives its path from this
            file.abs_src_path = str(course[file.src_uri])  # differs from ROOT / src_uri for the README page
    if _language(config) == ZH:
        return english_only_pages(files, config)
    jupyter = config.plugins.get("mkdocs-jupyter")  # the i18n plugin replaced its notebook pages by plain files
    return jupyter.on_files(files, config) if jupyter else files


def english_only_pages(files: Files, config) -> Files:
    """The Chinese build renders no notebook and no API page: links to them lead to the English pages.

    Each becomes an excluded file (never written) whose URL is the English page's, so a link from a
    Chinese page resolves to it and the strict build accepts it."""
    api = [f for f in files if f.src_uri.startswith("api/")]
    for file in api:
        files.remove(file)  # in place: the plugin's Files finds index.zh.md for index.md
    english = [uri for uri in _course_files() if uri.endswith(".ipynb")] + [f.src_uri for f in api]
    for src_uri in english:
        page = Path(src_uri).with_suffix("").as_posix()
        dest = f"{page}/index.html" if config.use_directory_urls and not page.endswith("/index") else f"{page}.html"
        files.append(File(src_uri, src_dir=config.docs_dir, dest_dir=config.site_dir,
                          use_directory_urls=config.use_directory_urls, dest_uri=dest,
                          inclusion=InclusionLevel.EXCLUDED))
    return files


on_files = CombinedEvent(add_course_files, restore_course_paths)


def on_page_markdown(markdown: str, page, config, files) -> str:
    src = page.file.src_uri
    if src.startswith("chapters/"):
        return markdown.replace("](../../docs/", "](../../")
    if src.startswith("exercises/"):
        return markdown.replace("](../docs/", "](../")
    if src in (README_PAGE, "readme.zh.md"):  # the README's two languages are readme(.zh).md on the site
        markdown = markdown.replace("](README.md)", "](readme.md)").replace("](README.zh.md)", "](readme.zh.md)")
        return markdown.replace("](docs/", "](")
    return markdown


def on_post_page(output: str, page, config) -> str:
    if page.file.src_uri == README_PAGE and _language(config) != ZH:  # the English build has no readme.zh.md
        return output.replace('href="readme.zh.md"', f'href="../{ZH}/readme/"')
    if page.file.src_uri.endswith(".ipynb"):
        chapter = Path(page.file.src_uri).parent.as_posix()
        output = output.replace('href="README.zh.md"', f'href="../../../{ZH}/{chapter}/"')
        return output.replace('href="README.md"', 'href="../"')
    return output
