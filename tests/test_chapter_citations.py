"""Every piece of minisgl a chapter cites exists: the `minisgl/...` paths, the `minisgl.x.y` dotted
names, the names its code imports from minisgl, and the `name()`, `Class.method` and `ClassName`
code spans of its prose. A renamed function or a moved file fails here, naming the chapter and the
citation, instead of leaving a lesson that points at nothing.

Code a chapter quotes is the code it quotes from: a fence labelled with its file,
```` ```py title="minisgl/layers/linear.py" ```` (the site shows the title above the block), must
match that file line for line, whitespace normalised, where a line holding only `...` (maybe with a
`# comment`) stands for any number of lines left out. Any other Python fence outside `## Run it` (the
notebook's cells) must carry such a label; a sketch that is not copied from a file is a ```` ```text ````.

Names are found by reading the source of minisgl and of the chapters' helpers (every def, class,
class attribute, dataclass field and `self.x = ...`), so nothing is imported but the modules a
chapter names. A span that names another
project's function (mini-SGLang's, vLLM's, NCCL's C API) is checked against the modules such names
come from (torch, triton, zmq, transformers, builtins) and, failing those, against `FOREIGN`.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import os
import re
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = sorted(ROOT.glob("chapters/[0-9][0-9]-*/README.md"))

# Names of other projects that chapters cite in prose, to compare with ours.
FOREIGN = {
    "start_subprocess", "_recv_msg_multi_rank0", "_recv_msg_multi_rank1", "parse_args",  # mini-SGLang
    "_init_communication",  # mini-SGLang
    "TokenizerManager", "DetokenizerManager", "DataParallelController", "TpModelWorker",  # SGLang
    "SchedulerOutput", "EngineCore", "MultiprocExecutor", "MessageQueue", "ParallelConfig",  # vLLM
    "DPLBAsyncMPClient", "CustomAllreduce", "DPEngineCoreProc", "IntermediateTensors", "PPMissingLayer",  # vLLM
    "ncclGetUniqueId", "ncclCommInitRank", "ncclAllReduce", "ncclAllGather", "ncclCommDestroy",  # NCCL's C API
    "plan",  # FlashInfer's wrappers
    "TorchDispatchMode",  # torch.utils._python_dispatch
    "RssAnon", "RssFile",  # fields of /proc/<pid>/status
}
# Where a citation that is not ours may come from; the first component may be a usual alias.
EXTERNAL_MODULES = ("builtins", "torch", "torch.distributed", "torch.nn.functional", "torch.cuda", "triton",
                    "triton.language", "zmq", "multiprocessing", "transformers", "safetensors", "msgpack")
ALIASES = {"dist": "torch.distributed", "F": "torch.nn.functional", "tl": "triton.language", "mp": "multiprocessing",
           "np": "numpy", "nn": "torch.nn"}

PATH = re.compile(r"(?<![\w/.])minisgl/[\w/.\-]*\w/?")
DOTTED = re.compile(r"(?<![\w.])minisgl(?:\.\w+)+")
SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
# a call `name(...)`, a dotted `A.b` / `a.b()`, or a bare `ClassName`
NAME = re.compile(r"^(?P<name>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)(?P<call>\(.*\))?$")
CAMEL = re.compile(r"^_?[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+$|^[A-Z][a-z]+$")
# a quoted excerpt: ```py title="path" ... ``` (or ```python); any Python fence, to find unlabelled ones
EXCERPT = re.compile(r'^```py(?:thon)? title="(?P<path>[^"]+)"\n(?P<code>.*?)^```', re.MULTILINE | re.DOTALL)
PYTHON_FENCE = re.compile(r"^```py(?:thon)?(?P<info>[^\n]*)\n", re.MULTILINE)
ELISION = re.compile(r"^\.\.\.(\s*#.*)?$")


class SourceIndex:
    """What minisgl and the chapters' helpers define, read from their source: every name, and the
members of each class."""

    def __init__(self) -> None:
        self.names: set[str] = set()  # every function, class, attribute anywhere
        self.members: dict[str, set[str]] = defaultdict(set)  # class -> its members (bases included)
        bases: dict[str, list[str]] = {}
        # the engine, the helpers the notebooks share (chapters/course.py, chapters/*/workers.py), and
        # the grader, which chapter 00 explains and the capstone plugs into the engine
        sources = [ROOT / "minisgl", ROOT / "chapters", ROOT / "exercises" / "grader"]
        for path in [p for source in sources for p in source.rglob("*.py")]:
            tree = ast.parse(path.read_text())
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    self.names.add(node.name)
                elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    for target in targets:
                        for name in ast.walk(target):
                            if isinstance(name, ast.Name):
                                self.names.add(name.id)
                            elif isinstance(name, ast.Attribute):
                                self.names.add(name.attr)
                if isinstance(node, ast.ClassDef):
                    bases[node.name] = [b.id for b in node.bases if isinstance(b, ast.Name)]
                    self.members[node.name] |= _class_members(node)
        for cls in list(self.members):
            for base in _ancestors(cls, bases):
                self.members[cls] |= self.members.get(base, set())

    def has(self, name: str) -> bool:
        return name in self.names


def _class_members(cls: ast.ClassDef) -> set[str]:
    members: set[str] = set()
    for node in cls.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            members.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            members.add(node.target.id)
        elif isinstance(node, ast.Assign):
            members |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    for node in ast.walk(cls):  # self.x = ... in any method
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for part in ast.walk(target):
                    if isinstance(part, ast.Attribute) and isinstance(part.value, ast.Name) and part.value.id == "self":
                        members.add(part.attr)
    return members


def _ancestors(cls: str, bases: dict[str, list[str]]) -> list[str]:
    found: list[str] = []
    todo = list(bases.get(cls, []))
    while todo:
        base = todo.pop()
        if base not in found:
            found.append(base)
            todo += bases.get(base, [])
    return found


def _resolve(dotted: str) -> bool:
    """Is `dotted` (a.b.c) an importable module, or an attribute chain below one?"""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def _external(name: str) -> bool:
    """`name` (maybe dotted, maybe behind an alias) exists in one of the usual outside modules."""
    first, _, rest = name.partition(".")
    if first in ALIASES:
        return _resolve(ALIASES[first] + ("." + rest if rest else ""))
    if first in ("torch", "triton", "zmq", "transformers", "multiprocessing", "numpy"):
        return _resolve(name)
    return any(_resolve(f"{module}.{name}") for module in EXTERNAL_MODULES if module != "builtins") or (
        not rest and hasattr(builtins, name)
    )


def span_problem(span: str, index: SourceIndex) -> str | None:
    """Why the code span `span` cites something that does not exist (None: fine, or not a citation)."""
    match = NAME.match(span.strip())
    if match is None:
        return None
    name, call = match["name"], match["call"]
    if name.startswith("minisgl."):
        return None if _resolve(name) else "not importable"
    first, _, rest = name.partition(".")
    if rest:
        if first in index.members:  # Class.member
            member = rest.split(".")[0]
            return None if member in index.members[first] else f"{first} has no member {member!r}"
        if CAMEL.match(first) and not index.has(first) and not _external(first) and first not in FOREIGN:
            return f"no class {first!r}"
        return None  # obj.method on some variable: too loose to check
    if call is not None:
        if index.has(name) or _external(name) or name in FOREIGN:
            return None
        return f"no function {name!r}"
    if CAMEL.match(name) and not (index.has(name) or _external(name) or name in FOREIGN):
        return f"no class {name!r}"
    return None


def _prose(lesson: str) -> str:
    return FENCE.sub("", lesson)


def _code(lesson: str) -> list[ast.Module]:
    """The lesson's code blocks that parse as Python (others are text, diagrams, shell)."""
    trees = []
    for fence in FENCE.findall(lesson):
        try:
            trees.append(ast.parse(fence))
        except SyntaxError:
            pass
    return trees


def _defined_in(lesson: str) -> set[str]:
    """Functions and classes the lesson's own code defines (it may cite them in its prose)."""
    return {node.name for tree in _code(lesson) for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.ClassDef))}


def _imports(lesson: str) -> list[tuple[str, str]]:
    """(module, name) of each `from minisgl... import name` in the lesson's code."""
    found = []
    for tree in _code(lesson):
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("minisgl"):
                found += [(node.module, alias.name) for alias in node.names]
            elif isinstance(node, ast.Import):
                found += [(alias.name, "") for alias in node.names if alias.name.startswith("minisgl")]
    return found


def _normalised(lines: list[str]) -> list[str]:
    """Each non-blank line with its runs of whitespace collapsed (indentation included)."""
    return [" ".join(line.split()) for line in lines if line.strip()]


def excerpt_problem(code: str, source: str) -> str | None:
    """Why `code` is not a copy of `source` (None: it is). `...` lines skip any number of source lines;
    the pieces between them must appear in the source in order, each as consecutive lines."""
    wanted = [line for line in code.splitlines() if line.strip()]
    pieces: list[list[str]] = [[]]
    for line in wanted:
        if ELISION.match(line.strip()):
            pieces.append([])
        else:
            pieces[-1].append(line)
    have = _normalised(source.splitlines())
    start = 0
    for piece in (_normalised(p) for p in pieces if p):
        found = next((i for i in range(start, len(have) - len(piece) + 1) if have[i : i + len(piece)] == piece), None)
        if found is None:
            matched = max(_matching_prefix(piece, have[i:]) for i in range(start, len(have) + 1))
            return f"this line is not in the file where the excerpt puts it: {piece[matched]!r}"
        start = found + len(piece)
    return None


def _matching_prefix(piece: list[str], lines: list[str]) -> int:
    count = 0
    while count < min(len(piece), len(lines)) and piece[count] == lines[count]:
        count += 1
    return count


def _outside_run_it(lesson: str) -> str:
    """The lesson without its `## Run it` section, whose Python fences are notebook cells."""
    head, found, rest = lesson.partition("\n## Run it\n")
    return head + ("\n## " + rest.split("\n## ", 1)[1] if found and "\n## " in rest else "")


@pytest.fixture(scope="module")
def index() -> SourceIndex:
    return SourceIndex()


@pytest.mark.parametrize("lesson", CHAPTERS, ids=lambda p: p.parent.name)
def test_cited_paths_exist(lesson: Path) -> None:
    text = lesson.read_text()
    missing = sorted({p for p in PATH.findall(text) if not (ROOT / p.rstrip("/")).exists()})
    assert not missing, f"{lesson.parent.name} cites paths that do not exist: {missing}"


@pytest.mark.parametrize("lesson", CHAPTERS, ids=lambda p: p.parent.name)
def test_cited_modules_and_imports_exist(lesson: Path) -> None:
    text = lesson.read_text()
    missing = sorted({name for name in DOTTED.findall(text) if not _resolve(name)})
    missing += [f"from {module} import {name}" for module, name in _imports(text)
                if not _resolve(f"{module}.{name}" if name else module)]
    assert not missing, f"{lesson.parent.name} cites minisgl names that do not exist: {missing}"


@pytest.mark.parametrize("lesson", CHAPTERS, ids=lambda p: p.parent.name)
def test_cited_functions_and_classes_exist(lesson: Path, index: SourceIndex) -> None:
    text = lesson.read_text()
    own = _defined_in(text)
    problems = sorted({f"`{span}`: {why}" for span in SPAN.findall(_prose(text))
                       if span.split("(")[0].split(".")[0] not in own and (why := span_problem(span, index))})
    assert not problems, f"{lesson.parent.name} cites code that does not exist:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("lesson", CHAPTERS, ids=lambda p: p.parent.name)
def test_quoted_code_matches_its_file(lesson: Path) -> None:
    problems = []
    for excerpt in EXCERPT.finditer(lesson.read_text()):
        path = ROOT / excerpt["path"]
        if not path.is_file():
            problems.append(f"{excerpt['path']}: no such file")
        elif why := excerpt_problem(excerpt["code"], path.read_text()):
            problems.append(f"{excerpt['path']}: {why}")
    assert not problems, (f"{lesson.parent.name} quotes code that is not in the file it names "
                          "(copy it again from the file):\n  " + "\n  ".join(problems))


@pytest.mark.parametrize("lesson", CHAPTERS, ids=lambda p: p.parent.name)
def test_quoted_python_names_its_file(lesson: Path) -> None:
    unlabelled = [m.group(0).strip() for m in PYTHON_FENCE.finditer(_outside_run_it(lesson.read_text()))
                  if not m["info"].strip().startswith("title=")]
    assert not unlabelled, (f"{lesson.parent.name} has Python blocks outside `## Run it` that name no file: "
                            f'{unlabelled}; label a quote ```py title="minisgl/..."```, or make a sketch ```text')


def test_the_excerpt_check_catches_a_changed_line() -> None:
    source = "def f(x):\n    y = g(x)\n    z = h(y)\n\n    return z + 1\n"
    assert excerpt_problem("def f(x):\n  y  =  g(x)\n", source) is None  # whitespace does not count
    assert excerpt_problem("def f(x):\n    ...  # g first\n    return z + 1\n", source) is None
    assert excerpt_problem("def f(x):\n    z = h(y)\n", source) == "this line is not in the file where the " \
        "excerpt puts it: 'z = h(y)'"  # a skipped line needs its `...`
    assert excerpt_problem("y = g(x)\n...\ndef f(x):\n", source) is not None  # out of order
    # chapter 01 used to show RowParallelLinear.forward as F.linear then all_reduce: not the engine's code
    old = "def forward(self, x: torch.Tensor) -> torch.Tensor:\n    partial = F.linear(x, self.weight)\n"
    assert excerpt_problem(old, (ROOT / "minisgl/layers/linear.py").read_text()) is not None


def test_the_checks_catch_a_renamed_function_and_a_moved_file(index: SourceIndex) -> None:
    """The checks can fail: what this change renamed and moved is reported."""
    assert span_problem("RankGroup.spawn", index) == "no class 'RankGroup'"
    assert span_problem("Engine._resolve_placeholders", index) == "Engine has no member '_resolve_placeholders'"
    assert span_problem("run_scheduler_process(rank_config, acks)", index) == "no function 'run_scheduler_process'"
    assert span_problem("minisgl.utils.make_ipc_dir", index) == "not importable"
    assert not (ROOT / "minisgl/server/ranks.py").exists()
    # and they let prose and other projects' names through
    for fine in ("ChildGroup.wait_ready", "spawn_ranks(group, config, addrs)", "dist.broadcast(..., src=0)",
                 "ncclGetUniqueId", "tp_info", "--tp-size", "[T, 192]", "engine.forward_logits", "KeyboardInterrupt"):
        assert span_problem(fine, index) is None, fine


# --- sources a learner can open ---------------------------------------------------------------------
# The chapters grew from source documents that are not public; a citation of one ("seed" + a three-digit
# number) points a learner at nothing. Other projects are cited at a fixed version, so a link keeps
# showing the code the sentence describes.
PRIVATE_SOURCE = re.compile(r"\bseeds?\s+\d{3}\b|\bseeds?\s*\d{3}\s*§", re.IGNORECASE)
PINNED_PROJECTS = ("sgl-project/mini-sglang", "sgl-project/sglang", "vllm-project/vllm")
GITHUB_LINK = re.compile(r"github\.com/(?P<repo>[\w.-]+/[\w.-]+)/(?:blob|tree)/(?P<ref>[^/\s)]+)")
PINNED_REF = re.compile(r"^(?:[0-9a-f]{40}|v\d+(?:\.\d+)+(?:\.post\d+)?)$")
LEARNER_SUFFIXES = {".md", ".py", ".ipynb", ".yml", ".toml", ".txt"}
# dev: docs/dev, helpers' notes; build: what make builds (a student release is a copy of the course)
NOT_FOR_LEARNERS = {".git", ".venv", "site", "dev", "__pycache__", ".pytest_cache", "build"}


def learner_files() -> list[Path]:
    """Every text file of the course a learner may read: lessons, notebooks, docs, exercises, engine."""
    found = []
    for folder, subfolders, files in os.walk(ROOT):
        subfolders[:] = sorted(d for d in subfolders if d not in NOT_FOR_LEARNERS and not d.endswith(".egg-info"))
        found += [Path(folder) / f for f in sorted(files) if Path(f).suffix in LEARNER_SUFFIXES]
    return found


def private_citations(text: str) -> list[str]:
    return [m.group(0) for m in PRIVATE_SOURCE.finditer(text)]


def unpinned_links(text: str) -> list[str]:
    return [m.group(0) for m in GITHUB_LINK.finditer(text)
            if m["repo"] in PINNED_PROJECTS and not PINNED_REF.match(m["ref"])]


def test_no_citation_of_a_source_learners_cannot_open() -> None:
    problems = [f"{path.relative_to(ROOT)}:{number}: {line.strip()[:100]}"
                for path in learner_files() if path != Path(__file__)
                for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
                if private_citations(line)]
    assert not problems, ("cite a public source (a paper, a pinned source file of mini-SGLang / SGLang / vLLM, "
                          "their docs) or a chapter instead of:\n  " + "\n  ".join(problems))


def test_other_projects_are_cited_at_a_fixed_version() -> None:
    problems = [f"{path.relative_to(ROOT)}: {link}" for path in learner_files() if path != Path(__file__)
                for link in unpinned_links(path.read_text(errors="replace"))]
    assert not problems, "link a tag (v0.32.0) or a full commit, not a branch:\n  " + "\n  ".join(problems)


def test_the_source_checks_can_fail() -> None:
    old = "se" + "ed 000 §3.3"  # split, so this file does not cite it itself
    assert private_citations(f"the loader ({old}, Seed 003 §8)") == [old[:8], "Seed 003"]
    assert private_citations("sampled with seed 0; --seed 1234; seed={seed}") == []
    assert unpinned_links("https://github.com/vllm-project/vllm/blob/main/vllm/v1/engine/core.py")
    assert unpinned_links("https://github.com/sgl-project/sglang/tree/20fcd7f/python")  # a short hash moves
    assert not unpinned_links("https://github.com/vllm-project/vllm/blob/v0.32.0/vllm/v1/engine/core.py")
    assert not unpinned_links("https://github.com/sgl-project/mini-sglang/blob/" + "a" * 40 + "/python")
    assert len(learner_files()) > 100 and ROOT / "chapters" / "build_notebooks.py" in learner_files()
