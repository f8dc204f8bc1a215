"""One way to do each thing, checked on the source: every collective lives in `minisgl/distributed/`,
every ZMQ socket in `minisgl/message/queues.py`, every import runs down the floors below (so no two
packages import each other: no cycle between them), and the engine asks its attention backend what
it supports instead of probing it."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "minisgl"
COLLECTIVES = {
    "all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "all_to_all", "barrier", "broadcast",
    "broadcast_object_list", "gather", "recv", "reduce", "reduce_scatter", "reduce_scatter_tensor", "scatter", "send",
}
# Every package (and top-level module) of minisgl, lowest first. A module may import its own package
# and the floors below its own, nothing on its floor or above: lazy imports inside functions and
# type-only imports count too (a protocol declared low, like `core.AttentionHooks`, replaces a type
# from above). The speed plug-ins (`cpu`, `kernel`) stand on the layers and models they speed up, so
# nothing taught imports them; the engine plugs them in.
FLOORS: list[tuple[str, ...]] = [
    ("utils", "trace", "core"),
    ("distributed", "kvcache", "message"),
    ("process",),
    ("layers",),
    ("models",),
    ("cpu", "kernel"),
    ("attention",),
    ("config",),  # the launch settings, checked once (minisgl/config.py)
    ("engine",),
    ("scheduler", "tokenizer"),
    ("llm", "server"),
    ("testing", "check_env", "__main__", "__init__"),
]
FLOOR = {name: level for level, names in enumerate(FLOORS) for name in names}


@functools.cache  # parsed once for all the tests here (no test changes a tree)
def _modules(package: str = "") -> list[tuple[str, ast.Module]]:
    """(path like minisgl/engine/engine.py, parsed source) of every file of minisgl/`package`."""
    root = PACKAGE / package
    return [(str(path.relative_to(PACKAGE.parent)), ast.parse(path.read_text())) for path in sorted(root.rglob("*.py"))]


def _dotted(node: ast.expr) -> str:
    """`a.b.c` of an attribute chain ("" for anything else)."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else ""


def test_every_collective_is_in_distributed() -> None:
    found = []
    for name, tree in _modules():
        if name.startswith("minisgl/distributed/"):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                callee = _dotted(node.func)
                if callee.rsplit(".", 1)[-1] in COLLECTIVES and callee.startswith(("dist.", "torch.distributed.")):
                    found.append(f"{name}:{node.lineno} {callee}")
    assert not found, f"collectives outside minisgl/distributed/ (give them a name there): {found}"


def test_every_zmq_socket_is_a_typed_queue() -> None:
    found = []
    for name, tree in _modules():
        if name == "minisgl/message/queues.py":
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                found += [f"{name}:{node.lineno} imports {m}" for m in modules if m.split(".")[0] == "zmq"]
    assert not found, f"ZMQ used outside minisgl/message/queues.py (use its queues): {found}"


def _unit(path: str) -> str:
    """The package (or top-level module) a file of minisgl belongs to: minisgl/cpu/table.py -> cpu."""
    parts = Path(path).relative_to("minisgl").parts
    return parts[0] if len(parts) > 1 else Path(parts[0]).stem


def _imported_units(path: str, tree: ast.Module) -> list[tuple[int, str]]:
    """(line, package or top-level module) of every minisgl import in a file, relative ones resolved."""
    package = Path(path).parent.relative_to("minisgl").parts
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level > 0:
            base = package[: len(package) - (node.level - 1)]
            module = ".".join(("minisgl", *base, *([node.module] if node.module else [])))
            names = [module] if node.module else [f"{module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
            if node.module == "minisgl":  # `from minisgl import cpu, kernel`
                names = [f"minisgl.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        found += [(node.lineno, name.split(".")[1]) for name in names if name.startswith("minisgl.")]
    return found


def test_every_package_has_a_floor() -> None:
    units = {_unit(name) for name, _ in _modules()}
    assert units <= set(FLOOR), f"give these a floor in FLOORS: {sorted(units - set(FLOOR))}"


@pytest.mark.parametrize("unit", sorted(FLOOR))
def test_no_import_runs_up_or_sideways(unit: str) -> None:
    found = []
    for name, tree in _modules():
        if _unit(name) != unit:
            continue
        for line, imported in _imported_units(name, tree):
            if imported != unit and FLOOR.get(imported, len(FLOORS)) >= FLOOR[unit]:
                found.append(f"{name}:{line} imports minisgl.{imported}")
    assert not found, f"minisgl/{unit} imports a package on its floor or above it (see FLOORS): {found}"


def test_the_engine_does_not_probe_the_attention_backend() -> None:
    found = []
    for name, tree in _modules("engine"):
        for node in ast.walk(tree):
            probe = isinstance(node, ast.Call) and _dotted(node.func) in ("hasattr", "getattr")
            if probe and node.args and "attn_backend" in ast.unparse(node.args[0]):
                found.append(f"{name}:{node.lineno} {ast.unparse(node)}")
    assert not found, f"declare the hook in AttentionBackend (attention/base.py) instead: {found}"
