"""The Chinese edition of the course pages: which English page each Chinese page translates, and
whether it still matches it.

A Chinese page sits beside its English page as NAME.zh.md (chapters/04-.../README.zh.md beside
README.md, docs/index.zh.md beside docs/index.md; the site shows it under /zh/) and starts with the
SHA-256 of the English text it translates:

    <!-- en-sha256: 3f2a... -->

Translate the prose; keep code blocks, figures, numbers, code spans and link targets exactly as in
the English page, in the same order. tests/test_translations.py fails when an English page changes
after its translation (the hash differs), when the two disagree on any of those, and when a course
page has no Chinese page and is not listed in PENDING, so a new chapter is flagged the day it lands.

    python docs/translations.py                  # every page: up to date, stale or missing
    python docs/translations.py hash chapters/04-weight-sharding/README.md   # the line to put on top
    python docs/translations.py check chapters/04-weight-sharding/README.zh.md   # what differs

After bringing a stale Chinese page up to date, replace its first line with the one `hash` prints.
Notebooks are not translated: the notebook's first cell links to the chapter's Chinese page.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUFFIX = ".zh.md"
HASH_LINE = re.compile(r"\A<!-- en-sha256: ([0-9a-f]{64}) -->\n")
# The README's course part only: these sections, by heading ("" is the text before the first "## ").
PARTS = {"README.md": ("", "Two commands", "The course")}
# Course pages whose Chinese page is still to be written (paths relative to the repository): until it
# is, the Chinese site shows the English page.
PENDING: set[str] = set()

FENCE = re.compile(r"^(`{3,}|~{3,})[^\n]*\n.*?^\1[ \t]*$", re.MULTILINE | re.DOTALL)
COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)[^)]*\)")
LINK = re.compile(r"\]\(([^)\s]+)[^)]*\)|^\[[^\]]+\]:\s*(\S+)", re.MULTILINE)
CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.DOTALL)
NUMBER = re.compile(r"(?<![A-Za-z0-9_.])\d+(?:[.,]\d+)*")  # counted next to a Chinese character too


def english_pages() -> list[Path]:
    """Every course page that has, or must get, a Chinese page."""
    pages = [ROOT / "docs" / "index.md", ROOT / "docs" / "prerequisites.md", ROOT / "README.md",
             ROOT / "exercises" / "README.md"]
    return pages + sorted(ROOT.glob("chapters/[0-9][0-9]-*/README.md"))


def chinese_page(english: Path) -> Path:
    return english.with_name(english.stem + SUFFIX)


def name(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def english_source(english: Path) -> str:
    """The English text a Chinese page translates: the whole page, or its PARTS."""
    text = english.read_text()
    parts = PARTS.get(name(english))
    if parts is None:
        return text
    sections = re.split(r"(?m)^(?=## )", text)
    title = lambda section: section.split("\n", 1)[0].removeprefix("## ").strip() if section.startswith("## ") else ""
    return "".join(section for section in sections if title(section) in parts)


def english_hash(english: Path) -> str:
    return hashlib.sha256(english_source(english).encode()).hexdigest()


def hash_line(english: Path) -> str:
    return f"<!-- en-sha256: {english_hash(english)} -->"


def recorded_hash(chinese_text: str) -> str | None:
    match = HASH_LINE.match(chinese_text)
    return match.group(1) if match else None


# --- what must be the same in both languages ---------------------------------------------------------

def code_blocks(text: str) -> list[str]:
    return [match.group(0) for match in FENCE.finditer(text)]


def _prose(text: str) -> str:
    return COMMENT.sub("", FENCE.sub("", text))


def figures(text: str) -> list[str]:
    return IMAGE.findall(_prose(text))


def links(text: str) -> Counter:
    """Link targets; a link to the other language's version of a page counts as one to the page."""
    return Counter((a or b).replace(SUFFIX, ".md") for a, b in LINK.findall(_prose(text)))


def code_spans(text: str) -> Counter:
    return Counter(" ".join(span.split()) for _, span in CODE_SPAN.findall(_prose(text)))  # a span may wrap


def numbers(text: str) -> Counter:
    """Numbers of the prose, outside code spans and link targets (compared on their own)."""
    prose = CODE_SPAN.sub(" ", _prose(text))
    prose = re.sub(r"\]\([^)]*\)|^\[[^\]]+\]:.*$|https?://\S+", " ", prose, flags=re.MULTILINE)
    return Counter(NUMBER.findall(prose))


def sections(text: str) -> list[str]:
    """The prose, split at its `## ` headings: code spans, links and numbers must stay in their section."""
    return re.split(r"(?m)^(?=## )", _prose(text))


def differences(english: str, chinese: str) -> list[str]:
    """What the Chinese page does not keep from the English one, one line each (empty: nothing)."""
    found = []
    en_blocks, zh_blocks = code_blocks(english), code_blocks(chinese)
    if en_blocks != zh_blocks:
        for i, (a, b) in enumerate(zip(en_blocks, zh_blocks)):
            if a != b:
                found.append(f"code block {i + 1} differs; English starts {a[:60]!r}")
                break
        if len(en_blocks) != len(zh_blocks):
            found.append(f"{len(en_blocks)} code blocks in English, {len(zh_blocks)} in Chinese")
    if figures(english) != figures(chinese):
        found.append(f"figures differ: English {figures(english)}, Chinese {figures(chinese)}")
    en_sections, zh_sections = sections(english), sections(chinese)
    if len(en_sections) != len(zh_sections):
        found.append(f"{len(en_sections) - 1} `## ` sections in English, {len(zh_sections) - 1} in Chinese")
        en_sections, zh_sections = [english], [chinese]  # then compare the pages as a whole
    for what, count in (("code spans", code_spans), ("link targets", links), ("numbers", numbers)):
        for en_section, zh_section in zip(en_sections, zh_sections):
            missing, extra = count(en_section) - count(zh_section), count(zh_section) - count(en_section)
            if missing or extra:
                where = en_section.split("\n", 1)[0] if en_section.startswith("## ") else "the page's top"
                found.append(f"{what} in {where!r}: missing in Chinese {sorted(missing.elements())[:12]}, "
                             f"not in English {sorted(extra.elements())[:12]}")
    return found


def state(english: Path) -> str:
    chinese = chinese_page(english)
    if not chinese.is_file():
        return "pending" if name(english) in PENDING else "missing"
    text = chinese.read_text()
    if recorded_hash(text) != english_hash(english):
        return "stale"
    return "differs" if differences(english_source(english), text) else "up to date"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", nargs="?", choices=["status", "hash", "check"], default="status")
    parser.add_argument("page", nargs="?", type=Path, help="an English page (hash) or a Chinese page (check)")
    args = parser.parse_args()
    if args.command == "hash":
        print(hash_line(args.page.resolve()))
        return 0
    if args.command == "check":
        chinese = args.page.resolve()
        english = chinese.with_name(chinese.name.removesuffix(SUFFIX) + ".md")
        problems = differences(english_source(english), chinese.read_text())
        if recorded_hash(chinese.read_text()) != english_hash(english):
            problems.insert(0, f"stale: the English page changed; its hash line now is {hash_line(english)}")
        print("\n".join(problems) or "up to date")
        return 1 if problems else 0
    states = {name(page): state(page) for page in english_pages()}
    for page, page_state in states.items():
        print(f"{page_state:10}  {page}")
    return 0 if all(s in ("up to date", "pending") for s in states.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
