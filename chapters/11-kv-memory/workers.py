"""Code for chapter 11 that its notebook calls: a radix tree as text and as a picture, a
multi-turn chat driven through one scheduler, and the body each rank runs to show that every TP
rank builds the same tree from the same messages."""

from __future__ import annotations

import sys
from pathlib import Path

from minisgl.core import SamplingParams
from minisgl.kvcache import RadixNode, RadixTree
from minisgl.message import GenerateRequest
from minisgl.scheduler import LocalIO, Scheduler

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


def chat(scheduler: Scheduler, io: LocalIO, turns: list[list[list[int]]], max_tokens: int) -> list[list[int]]:
    """A multi-turn chat per conversation, all conversations at once: each turn's prompt is the
    conversation so far (earlier prompts and answers) plus the user's next turn, sent when the
    previous answer is complete. Returns every answer, in the order they finished."""
    params = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
    history = [[] for _ in turns]
    next_turn = [0] * len(turns)
    waiting: dict[int, int] = {}  # uid -> its conversation
    answers: dict[int, list[int]] = {}
    finished: list[list[int]] = []
    uid = 0

    def send(c: int) -> None:
        nonlocal uid
        history[c] += turns[c][next_turn[c]]
        next_turn[c] += 1
        io.inbox.append(GenerateRequest(uid, list(history[c]), params))
        waiting[uid], answers[uid] = c, []
        uid += 1

    for c in range(len(turns)):
        send(c)
    while waiting:
        scheduler.step()
        for output in io.outbox:
            answers[output.uid] += output.token_ids
            if output.finished:
                c = waiting.pop(output.uid)
                history[c] += answers[output.uid]
                finished.append(answers[output.uid])
                if next_turn[c] < len(turns[c]):
                    send(c)
        io.outbox.clear()
    return finished


def tree_on_rank(rank: int, world_size: int, model_dir: Path, init_addr: str, turns: list[list[list[int]]],
                 max_tokens: int) -> list[str]:
    """A real engine and scheduler on this rank, fed the same chat as every other rank (what rank
    0's broadcast guarantees); returns this rank's radix tree as text."""
    engine = engine_on_this_rank(rank, world_size, model_dir, init_addr, num_pages=512, page_size=4)
    io = LocalIO()
    scheduler = Scheduler(engine.config, engine, io)
    chat(scheduler, io, turns, max_tokens)
    engine.shutdown()
    return tree_lines(scheduler.cache.tree)
