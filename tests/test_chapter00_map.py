"""Chapter 00's map of the package names every subpackage of minisgl/, and nothing else, in both
languages, with chapter numbers that exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHAPTER = ROOT / "chapters/00-getting-started"
ROW = re.compile(r"^\| (`[a-z_]+/`(?:, `[a-z_]+/`)*) \| .* \| ([^|]+) \|$", re.MULTILINE)


def subpackages() -> set[str]:
    return {p.parent.name for p in (ROOT / "minisgl").glob("*/__init__.py")}


def map_rows(page: Path) -> dict[str, str]:
    rows = {}
    for folders, chapters in ROW.findall(page.read_text()):
        for folder in re.findall(r"`([a-z_]+)/`", folders):
            rows[folder] = chapters.strip()
    return rows


@pytest.mark.parametrize("page", ["README.md", "README.zh.md"])
def test_the_map_lists_every_subpackage(page: str) -> None:
    rows = map_rows(CHAPTER / page)
    assert set(rows) == subpackages()
    numbers = {p.name[:2] for p in (ROOT / "chapters").iterdir() if re.match(r"\d\d-", p.name)}
    for folder, chapters in rows.items():
        if chapters in ("none", "无"):
            continue
        assert set(re.findall(r"\d\d", chapters)) <= numbers, folder
        assert re.fullmatch(r"\d\d(, \d\d)*", chapters), (folder, chapters)


def test_both_languages_map_the_same_chapters() -> None:
    en, zh = map_rows(CHAPTER / "README.md"), map_rows(CHAPTER / "README.zh.md")
    assert {k: v.replace("无", "none") for k, v in zh.items()} == en
