"""Links in the course's Markdown work where learners read it: on the repository host as well as on
the site. Each relative link must point at a file of the repository, relative to the file that holds
it; docs/hooks.py turns such links into site links, and `mkdocs build --strict` checks that side."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted([*ROOT.glob("docs/**/*.md"), ROOT / "README.md", ROOT / "CONTRIBUTING.md",
                *ROOT.glob("exercises/*.md"), *ROOT.glob("chapters/[0-9][0-9]-*/README.md")])
LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)\s]*)?\)")  # ](target#anchor) of a Markdown link or image
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def broken_links(page: Path, text: str) -> list[str]:
    """The relative link targets in `text` (Markdown of `page`) that name no file of the repository."""
    targets = LINK.findall(FENCE.sub("", text))
    return [t for t in targets if ":" not in t and not t.startswith("/") and not (page.parent / t).exists()]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_point_at_files_of_the_repository(page: Path) -> None:
    broken = broken_links(page, page.read_text())
    assert not broken, (f"{page.relative_to(ROOT)} links to {broken}, which do not exist relative to it in the "
                        "repository: write links relative to the file (docs/hooks.py maps them onto the site)")


def test_a_site_only_link_is_caught() -> None:
    # docs/index.md used to link chapters/... as the site lays them out, which the repository host cannot follow
    assert broken_links(ROOT / "docs/index.md", "[chapter 00](chapters/00-getting-started/README.md)") == [
        "chapters/00-getting-started/README.md"]
    assert broken_links(ROOT / "docs/index.md", "[chapter 00](../chapters/00-getting-started/README.md#run-it)") == []
