"""One way to do each thing, checked on the source: every collective lives in `minisgl/distributed/`,
every ZMQ socket in `minisgl/message/queues.py`, no package imports one above it, and the engine
asks its attention backend what it supports instead of probing it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "minisgl"
COLLECTIVES = {
    "all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "all_to_all", "barrier", "broadcast",
    "broadcast_object_list", "gather", "recv", "reduce", "reduce_scatter", "reduce_scatter_tensor", "scatter", "send",
}
# package -> packages it must never import (they sit above it)
FORBIDDEN_IMPORTS = {
    "trace": ("minisgl.server", "minisgl.llm", "minisgl.scheduler", "minisgl.tokenizer", "minisgl.engine",
              "minisgl.distributed", "minisgl.process", "minisgl.message", "minisgl.layers", "minisgl.models"),
    "llm": ("minisgl.server",),
    "tokenizer": ("minisgl.scheduler", "minisgl.server", "minisgl.llm"),
    "scheduler": ("minisgl.server", "minisgl.llm", "minisgl.tokenizer"),
    "process": ("minisgl.server", "minisgl.llm", "minisgl.scheduler", "minisgl.tokenizer", "minisgl.engine"),
    "message": ("minisgl.server", "minisgl.llm", "minisgl.scheduler", "minisgl.tokenizer", "minisgl.engine"),
    "distributed": ("minisgl.server", "minisgl.llm", "minisgl.scheduler", "minisgl.engine", "minisgl.layers"),
}


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


@pytest.mark.parametrize("package", sorted(FORBIDDEN_IMPORTS))
def test_no_package_imports_one_above_it(package: str) -> None:
    found = []
    for name, tree in _modules(package):
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                modules = [node.module or ""]
            elif isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            else:
                continue
            found += [f"{name}:{node.lineno} imports {m}" for m in modules
                      if m.startswith(FORBIDDEN_IMPORTS[package])]
    assert not found, f"minisgl/{package}/ imports a package above it: {found}"


def test_the_engine_does_not_probe_the_attention_backend() -> None:
    found = []
    for name, tree in _modules("engine"):
        for node in ast.walk(tree):
            probe = isinstance(node, ast.Call) and _dotted(node.func) in ("hasattr", "getattr")
            if probe and node.args and "attn_backend" in ast.unparse(node.args[0]):
                found.append(f"{name}:{node.lineno} {ast.unparse(node)}")
    assert not found, f"declare the hook in AttentionBackend (attention/base.py) instead: {found}"
