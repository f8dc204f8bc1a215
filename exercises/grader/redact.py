"""The copy of minisgl a sandboxed worker imports: the engine with its own answers cut out.

Each function listed in off_limits.py is rewritten in the copy's source so that its body raises
`OffLimits` with a message naming it (its signature, decorators and docstring stay, so the engine
still imports and everything else in it works). A "plugged-only" function keeps its body up to its
plug-in branch (`if ops is not None: return ops...`) and raises after it, so the capstone's engine
still dispatches to the learner's steps but can never fall through to its own.

This holds against anything learner code does in its process: an alias taken earlier, a cleared
table, `importlib.reload`, a second import from `__file__`, or `exec` of the module's source all
find the same rewritten text, because that is the only minisgl source the worker's user can read
(run_autograder makes the real package unreadable to it; see sandbox.py).
"""

from __future__ import annotations

import ast
import shutil
from collections import defaultdict
from pathlib import Path

OFF_LIMITS_CLASS = (
    "class OffLimits(RuntimeError):\n"
    '    """Raised by engine code that implements a course task, in the grader\'s copy of minisgl."""\n\n\n'
)


class RedactionError(Exception):
    """An off-limits entry no longer matches the engine (one line naming the entry to update)."""


def module_file(package_dir: Path, module: str) -> Path:
    """`minisgl.layers.linear` -> <package_dir>/layers/linear.py (or a package's __init__.py)."""
    parts = module.split(".")[1:]
    path = package_dir.joinpath(*parts)
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def _find(tree: ast.Module, qualname: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The def of `Class.method` (or `function`); a property's `.fget` names its getter."""
    parts = qualname.removesuffix(".fget").split(".")
    scope: list[ast.stmt] = tree.body
    for index, part in enumerate(parts):
        last = index == len(parts) - 1
        kinds = (ast.FunctionDef, ast.AsyncFunctionDef) if last else (ast.ClassDef,)
        found = [node for node in scope if isinstance(node, kinds) and node.name == part]
        if not found:
            return None
        node = found[-1]  # a property's setter may follow its getter; the getter is the first def
        if last and qualname.endswith(".fget"):
            node = found[0]
        if last:
            return node  # type: ignore[return-value]
        scope = node.body  # type: ignore[attr-defined]
    return None


def _plug_in_branch(function: ast.FunctionDef | ast.AsyncFunctionDef) -> int | None:
    """Index in the body of the first `if <name> is not None:` statement, or None."""
    for index, statement in enumerate(function.body):
        test = statement.test if isinstance(statement, ast.If) else None
        if (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.IsNot)
                and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value is None):
            return index
    return None


def _body_start(function: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Index of the first body statement that is not the docstring."""
    first = function.body[0]
    return 1 if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and \
        isinstance(first.value.value, str) and len(function.body) > 1 else 0


def redact_source(source: str, entries: dict[str, str], plugged_only: set[str]) -> str:
    """`source` with every function in `entries` (qualname -> message) raising OffLimits(message)
    from its first statement after the docstring, or, for names in `plugged_only`, after its
    plug-in branch."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    cuts: list[tuple[int, int, str]] = []  # (first line, last line, replacement), 1-based, inclusive
    for qualname, message in entries.items():
        function = _find(tree, qualname)
        if function is None:
            raise RedactionError(f"off-limits entry {qualname} is not a function of this module any more")
        keep = _body_start(function)
        if qualname in plugged_only:
            branch = _plug_in_branch(function)
            if branch is None or branch + 1 >= len(function.body):
                raise RedactionError(f"plugged-only entry {qualname} has no `if ... is not None:` plug-in branch "
                                     "followed by the engine's own code")
            keep = branch + 1
        first, last = function.body[keep], function.body[-1]
        if first.lineno == function.lineno:
            raise RedactionError(f"off-limits entry {qualname} is written on one line; the grader cannot cut it")
        indent = " " * first.col_offset
        cuts.append((first.lineno, last.end_lineno or last.lineno, f"{indent}raise OffLimits({message!r})\n"))
    for first, last, replacement in sorted(cuts, reverse=True):
        lines[first - 1:last] = [replacement]
    insert_at = _after_header(tree)
    lines[insert_at:insert_at] = [OFF_LIMITS_CLASS]
    redacted = "".join(lines)
    compile(redacted, "<redacted>", "exec")  # a cut that broke the module is the grader's bug: fail here
    return redacted


def _after_header(tree: ast.Module) -> int:
    """0-based line index after the module docstring and `from __future__` imports."""
    end = 0
    for statement in tree.body:
        docstring = isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant) and end == 0
        future = isinstance(statement, ast.ImportFrom) and statement.module == "__future__"
        if not (docstring or future):
            break
        end = statement.end_lineno or statement.lineno
    return end


def redacted_copy(package_dir: Path, out_dir: Path, entries: dict[str, str], plugged_only: set[str]) -> Path:
    """A copy of the package at `package_dir` (minisgl) in `out_dir`/minisgl with `entries`
    ("module:qualname" -> message) cut out; returns `out_dir`."""
    target = out_dir / package_dir.name
    shutil.copytree(package_dir, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.so"))
    by_module: dict[str, dict[str, str]] = defaultdict(dict)
    for entry, message in entries.items():
        module, _, qualname = entry.partition(":")
        by_module[module][qualname] = message
    for module, functions in by_module.items():
        path = module_file(target, module)
        if not path.is_file():
            raise RedactionError(f"off-limits entries name module {module}, which the engine no longer has")
        plugged = {q for q in functions if f"{module}:{q}" in plugged_only}
        try:
            path.write_text(redact_source(path.read_text(), functions, plugged))
        except RedactionError as error:
            raise RedactionError(f"{module}: {error}; update exercises/grader/off_limits.py") from None
    return out_dir
