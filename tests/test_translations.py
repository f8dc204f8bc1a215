"""The Chinese edition keeps up with the English one (docs/translations.py): every course page has a
Chinese page or is listed as pending; each Chinese page records the hash of the English text it
translates, which must be the English page's current one; and the two pages have the same code
blocks, figures, code spans, link targets and numbers. A changed English page therefore fails here,
naming its Chinese page, until the translation follows."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("translations", ROOT / "docs" / "translations.py")
tr = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tr)

PAGES = tr.english_pages()
TRANSLATED = [page for page in PAGES if tr.chinese_page(page).is_file()]


@pytest.mark.parametrize("english", PAGES, ids=tr.name)
def test_every_course_page_has_a_chinese_page_or_is_pending(english: Path) -> None:
    chinese = tr.name(tr.chinese_page(english))
    if tr.name(english) in tr.PENDING:
        assert chinese not in [tr.name(tr.chinese_page(p)) for p in TRANSLATED], (
            f"{chinese} exists: take {tr.name(english)} off PENDING in docs/translations.py")
    else:
        assert english in TRANSLATED, (f"{tr.name(english)} has no Chinese page: write {chinese} "
                                       "(docs/translations.py says how), or list it in PENDING there")


def test_pending_lists_course_pages_only() -> None:
    assert tr.PENDING <= {tr.name(page) for page in PAGES}, tr.PENDING - {tr.name(page) for page in PAGES}


@pytest.mark.parametrize("english", TRANSLATED, ids=tr.name)
def test_chinese_page_translates_the_current_english_page(english: Path) -> None:
    recorded = tr.recorded_hash(tr.chinese_page(english).read_text())
    assert recorded is not None, f"{tr.name(tr.chinese_page(english))} must start with {tr.hash_line(english)}"
    assert recorded == tr.english_hash(english), (
        f"{tr.name(english)} changed after {tr.name(tr.chinese_page(english))} was translated: bring the "
        f"Chinese page up to date (git log -p {tr.name(english)}), then make its first line {tr.hash_line(english)}")


@pytest.mark.parametrize("english", TRANSLATED, ids=tr.name)
def test_chinese_page_keeps_code_figures_and_numbers(english: Path) -> None:
    problems = tr.differences(tr.english_source(english), tr.chinese_page(english).read_text())
    assert not problems, f"{tr.name(tr.chinese_page(english))}:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("english", [p for p in TRANSLATED if p.parent.parent.name == "chapters"],
                         ids=lambda p: p.parent.name)
def test_the_notebook_links_the_chinese_page(english: Path) -> None:
    notebook = json.loads((english.parent / f"{english.parent.name}.ipynb").read_text())
    assert "](README.zh.md)" in "".join(notebook["cells"][0]["source"]), "run `make notebooks`"


def test_the_checks_can_fail() -> None:
    english = ("# Title\n\nSplit 4096 rows with `shard(x)`; see [ch 05](../05/README.md).\n\n"
               "![plot](figures/a.png)\n\n```python\nprint(65)\n```\n")
    chinese = ("# 标题\n\n用 `shard(x)` 切分 4096 行；见[第 05 章](../05/README.md)。\n\n"
               "![图](figures/a.png)\n\n```python\nprint(65)\n```\n")
    assert tr.differences(english, chinese) == []
    assert tr.differences(english, chinese.replace("print(65)", "print(66)"))  # code
    assert tr.differences(english, chinese.replace("4096", "4095"))  # a number
    assert tr.differences(english, chinese.replace("4096 行", "4096行，共2个"))  # one next to Chinese text
    moved = ("# T\n\n## A\n\ntp = 2.\n\n## B\n\ntp = 4.\n", "# T\n\n## A\n\ntp = 4。\n\n## B\n\ntp = 2。\n")
    assert tr.differences(*moved)  # numbers (and code spans, links) stay in their section
    assert tr.differences(moved[0], "# T\n\n## A\n\ntp = 2，tp = 4。\n")  # a section left out
    assert tr.differences(english, chinese.replace("`shard(x)`", "`split(x)`"))  # a function name
    assert tr.differences(english, chinese.replace("figures/a.png", "figures/b.png"))  # a figure
    assert tr.differences(english, chinese.replace("../05/README.md", "../06/README.md"))  # a link
    readme = ROOT / "README.md"  # the README's hash covers its course part, not the rest
    assert tr.english_source(readme).startswith("# minisgl") and "## The course" in tr.english_source(readme)
    assert "## Layout" not in tr.english_source(readme)
    assert tr.recorded_hash("<!-- en-sha256: " + "0" * 64 + " -->\n# x") == "0" * 64
    assert tr.recorded_hash("# x\n<!-- en-sha256: " + "0" * 64 + " -->\n") is None
