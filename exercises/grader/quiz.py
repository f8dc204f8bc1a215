"""The chapter quizzes: questions read from the quiz files, keys from the reference answers.

A quiz file (`exercises/quizzes/chNN.py`) is the one source of its questions: each is a comment
`# Qn (kind). text`, its options one per line as `#   a) text`, then `Qn = None`. Four kinds, all
machine-checkable, so no keyword salad can pass:

- choice: one letter;                          1 point
- number: an int or float, within 1 %;         1 point
- multi:  every letter that applies, e.g. "bd"; 2 points, the exact set or nothing
- order:  every letter once, in order, e.g. "cabd"; 2 points, the exact order or nothing

The keys are the reference answers, `solutions/quizzes/chNN.py`: the instructor's repository and
the autograder bundle have them; a student release does not, and there a well-formed answer is
reported as submitted, to be graded by the autograder. No message ever shows a key.

Answers and keys are data: a quiz file is parsed, never imported or run. Its statements may only
be `Qn = <literal>` (a string, a number, None); anything else - an import, a call, an f-string, a
function - makes the whole file score zero, with one line saying which line to remove. The file
is read as a regular file of bounded size, never through a link, and no file makes the reader
raise (a link, a FIFO, a huge or too deeply nested file is one line scoring that quiz zero).
"""

from __future__ import annotations

import ast
import errno
import math
import os
import re
import stat
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
QUESTIONS_DIR = REPO_ROOT / "exercises" / "quizzes"
KEYS_DIR = REPO_ROOT / "solutions" / "quizzes"
MAX_QUIZ_BYTES = 256 * 1024  # a quiz file of answers is a few hundred bytes; more is not one
POINTS = {"choice": 1.0, "number": 1.0, "multi": 2.0, "order": 2.0}
NUMBER_REL_TOL = 0.01

_HEADER = re.compile(r"^# (Q\d+) \((choice|number|multi|order)\)\. ", re.MULTILINE)
_OPTION = re.compile(r"^#\s+([a-z])\) (.*)$")
_CONTINUATION = re.compile(r"^#\s{4,}(\S.*)$")


@dataclass(frozen=True)
class Question:
    chapter: str  # "05"
    id: str  # "Q3"
    kind: str  # choice | number | multi | order
    options: tuple[tuple[str, str], ...]  # (letter, text), for choice, multi and order

    @property
    def points(self) -> float:
        return POINTS[self.kind]

    @property
    def letters(self) -> str:
        return "".join(letter for letter, _ in self.options)


def parse(chapter: str, source: str) -> list[Question]:
    """The questions of one quiz file, in order."""
    questions = []
    lines = source.splitlines()
    for index, line in enumerate(lines):
        header = _HEADER.match(line)
        if not header:
            continue
        options: list[list[str]] = []
        for follower in lines[index + 1:]:
            if not follower.startswith("#") or _HEADER.match(follower):
                break
            if option := _OPTION.match(follower):
                options.append([option.group(1), option.group(2)])
            elif options and (more := _CONTINUATION.match(follower)):
                options[-1][1] += " " + more.group(1)
        kind = header.group(2)
        if (kind == "number") != (not options):
            raise ValueError(f"quizzes/ch{chapter}.py {header.group(1)}: a {kind} question "
                             f"{'has no options' if options else 'takes no options'}")
        questions.append(Question(chapter, header.group(1), kind, tuple((a, b) for a, b in options)))
    return questions


def _quiz_file(chapter: str) -> Path:
    """Where the questions are read: the key file when there is one (a submission cannot rewrite it)."""
    key_file = KEYS_DIR / f"ch{chapter}.py"
    return key_file if key_file.is_file() else QUESTIONS_DIR / f"ch{chapter}.py"


@cache
def questions(chapter: str) -> list[Question]:
    return parse(chapter, _quiz_file(chapter).read_text())


def quiz_chapters() -> list[str]:
    """The chapters that have a quiz."""
    from .chapters import CHAPTERS

    return [chapter for chapter in CHAPTERS if _quiz_file(chapter).is_file()]


def _is_docstring(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


class _Refused(Exception):
    """A quiz file that is not read at all; the message says why."""


def _read_quiz_file(path: Path) -> str | None:
    """The text of the quiz file `path` (`<root>/quizzes/chNN.py`), read without following a link
    at either of its last two names (a submission may plant `quizzes/` or the file as a link to the
    keys), as a regular file of at most MAX_QUIZ_BYTES: never a FIFO, a device or /dev/zero. None
    when it is missing; a `_Refused` with the one-line reason otherwise."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # NONBLOCK: opening a FIFO never waits
    try:
        folder = os.open(path.parent, flags | os.O_DIRECTORY)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise _Refused(f"{path.parent.name}/ is not a plain folder ({os.strerror(error.errno)})") from None
    try:
        fd = os.open(path.name, flags, dir_fd=folder)
    except FileNotFoundError:
        return None
    except OSError as error:
        reason = "a link" if error.errno == errno.ELOOP else os.strerror(error.errno)
        raise _Refused(f"{path.name} is not a plain file ({reason})") from None
    finally:
        os.close(folder)
    with os.fdopen(fd, "rb") as file:
        if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
            raise _Refused(f"{path.name} is not a plain file")
        data = file.read(MAX_QUIZ_BYTES + 1)
    if len(data) > MAX_QUIZ_BYTES:
        raise _Refused(f"{path.name} is over {MAX_QUIZ_BYTES // 1024} KiB; a quiz file holds only `Qn = <answer>` lines")
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise _Refused(f"{path.name} is not UTF-8 text") from None


def _shown(node: ast.AST) -> str:
    """The start of a statement, for a message; a tree too deep to print is named, not printed."""
    try:
        return ast.unparse(node)[:60]
    except (RecursionError, MemoryError, ValueError):
        return "an expression nested too deep"


@cache
def answers(path: Path) -> dict[str, Any] | str | None:
    """Qn -> the value assigned in the quiz file at `path`, read without running it; a one-line
    reason (str) when the file holds anything but `Qn = <literal>` lines, or cannot be read as a
    plain file (`_read_quiz_file`); None when it is missing. Total: no file makes it raise."""
    try:
        source = _read_quiz_file(path)
    except _Refused as refused:
        return f"{refused}; every answer of this quiz scores 0 until it is"
    if source is None:
        return None
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError) as error:
        return (f"line {getattr(error, 'lineno', '?')} is not valid Python ({getattr(error, 'msg', error)}); "
                "every answer of this quiz scores 0 until the file parses")
    except (RecursionError, MemoryError):
        return "the file is nested too deep to parse; every answer of this quiz scores 0 until it parses"
    found: dict[str, Any] = {}
    for index, node in enumerate(tree.body):
        if index == 0 and _is_docstring(node):
            continue
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None
        if not (isinstance(target, ast.Name) and re.fullmatch(r"Q\d+", target.id)):
            return (f"line {node.lineno}: a quiz file holds only `Qn = <answer>` lines (and comments), found "
                    f"{type(node).__name__.lower()} `{_shown(node)}`; every answer of this quiz scores "
                    "0 until that line goes")
        try:
            found[target.id] = ast.literal_eval(node.value)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return (f"line {node.lineno}: {target.id} must be a plain value (a string, a number or None), not "
                    f"`{_shown(node.value)}`; every answer of this quiz scores 0 until it is")
    return found


@cache
def keys(chapter: str) -> dict[str, Any] | None:
    """Qn -> the key, or None where this copy of the course has no keys (a student release)."""
    found = answers(KEYS_DIR / f"ch{chapter}.py")
    if isinstance(found, str):
        raise ValueError(f"solutions/quizzes/ch{chapter}.py: {found}")
    return found


def _letters(answer: str) -> str:
    return re.sub(r"[\s,;>.-]", "", answer.lower())


def example(question: Question) -> str:
    """The form an answer takes, the same for every question of a kind (never a key: tested)."""
    return {"choice": "b", "multi": "bd", "order": question.letters[::-1]}[question.kind]


def format_problem(question: Question, answer: Any) -> str | None:
    """What is wrong with the *form* of an answer (never whether it is right), or None."""
    if question.kind == "number":
        if isinstance(answer, bool) or not isinstance(answer, (int, float)) or not math.isfinite(answer):
            return f"answer with a number (an int or a float); got {answer!r}"
        return None
    allowed = question.letters
    if not isinstance(answer, str) or not re.fullmatch(rf"[{allowed}]+", _letters(answer), re.IGNORECASE):
        return f"answer with letters from {', '.join(allowed)} in a string, e.g. {example(question)!r}; got {answer!r}"
    letters = _letters(answer)
    if question.kind == "choice" and len(letters) != 1:
        return f"answer with exactly one letter; got {answer!r}"
    if question.kind == "order" and sorted(letters) != sorted(allowed):
        return f"put every letter {', '.join(allowed)} exactly once, in your order; got {answer!r}"
    return None


def is_right(question: Question, answer: Any, key: Any) -> bool:
    """Whether a well-formed answer matches the key."""
    if question.kind == "number":
        return math.isclose(answer, key, rel_tol=NUMBER_REL_TOL, abs_tol=1e-9)
    if question.kind == "multi":
        return set(_letters(answer)) == set(key)
    return _letters(answer) == key
