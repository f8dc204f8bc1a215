"""Code for chapter 11 that its notebook calls: a radix tree as text and as a picture, and the body
each rank runs to show that every TP rank builds the same tree from the same messages (the chat
itself is `minisgl.testing.multi_turn.run_chat`, which `benchmark/prefix_cache.py` times)."""

from __future__ import annotations

import sys
from pathlib import Path

from minisgl.core import SamplingParams
from minisgl.kvcache import RadixNode, RadixTree
from minisgl.testing.engine_runs import InProcessRun
from minisgl.testing.multi_turn import run_chat

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from course import engine_on_this_rank  # noqa: E402


def tree_lines(tree: RadixTree) -> list[str]:
    """One line per node, children indented under their parent (oldest first)."""
    lines: list[str] = []

    def visit(node: RadixNode, depth: int) -> None:
        for child in sorted(node.children.values(), key=lambda n: n.id):
            shown = " ".join(map(str, child.key[:8])) + (" ..." if len(child.key) > 8 else "")
            lines.append(f"{'    ' * depth}[{shown}] {len(child.key)} tokens in pages {child.pages} "
                         f"(lock_ref {child.lock_ref}, last_access {child.last_access})")
            visit(child, depth + 1)

    visit(tree.root, 0)
    return lines


def draw_tree(tree: RadixTree, ax) -> None:
    """Boxes for nodes (tokens and pages held; darker = used more recently), lines to parents.
    Leaves are spread left to right, each parent sits above the middle of its children."""
    positions: dict[int, tuple[float, float]] = {}
    next_leaf = [0.0]

    def place(node: RadixNode, depth: int) -> float:
        children = sorted(node.children.values(), key=lambda n: n.id)
        if children:
            xs = [place(child, depth + 1) for child in children]
            x = (xs[0] + xs[-1]) / 2
        else:
            x, next_leaf[0] = next_leaf[0], next_leaf[0] + 1
        positions[node.id] = (x, -depth)
        return x

    place(tree.root, 0)
    nodes = {tree.root.id: tree.root}
    stack = [tree.root]
    while stack:
        for child in stack.pop().children.values():
            nodes[child.id] = child
            stack.append(child)
    newest = max(1, max(n.last_access for n in nodes.values()))
    for node_id, (x, y) in positions.items():
        node = nodes[node_id]
        if node.parent is not None:
            px, py = positions[node.parent.id]
            ax.plot([px, x], [py, y], color="0.6", zorder=1)
        label = "root" if node is tree.root else f"{len(node.key)} tokens\n{len(node.pages)} pages"
        shade = 0.25 + 0.6 * node.last_access / newest
        ax.text(x, y, label, ha="center", va="center", fontsize=8, zorder=2,
                bbox={"boxstyle": "round", "fc": (1 - shade * 0.6, 1 - shade * 0.3, 1.0), "ec": "0.4"})
    ax.set_xlim(-0.7, max(next_leaf[0] - 0.3, 0.7))
    ax.set_ylim(min(y for _, y in positions.values()) - 0.6, 0.6)
    ax.axis("off")


def tree_on_rank(rank: int, world_size: int, model_dir: Path, init_addr: str, turns: list[list[list[int]]],
                 max_tokens: int) -> list[str]:
    """A real engine and scheduler on this rank, fed the same chat as every other rank (what rank
    0's broadcast guarantees); returns this rank's radix tree as text."""
    engine = engine_on_this_rank(rank, world_size, model_dir, init_addr, num_pages=512, page_size=4)
    run = InProcessRun(engine.config, engine)
    run_chat(run, turns, SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True))
    run.close()
    return tree_lines(run.scheduler.cache.tree)
