"""Grades chapter 11 on the engine's own RadixTree: trees built by hand (page sizes 1 and 2) for
each clause of the contracts, and random trees (page sizes 1, 2, 3; fresh on every run, the seed
shown in any failure) checked against the engine's own match and evict on a twin of the tree.

The trees are built here, with the engine's methods, and sent to the learner's worker as data; the
worker rebuilds them, runs the learner's function, and sends the tree back as it was left. The
twin, and the engine's answers on it, never leave this process."""

from __future__ import annotations

import random

import pytest

from exercises.grader import adapters
from exercises.grader.checks import tree_from_reply
from exercises.grader.outcomes import WrongAnswer
from exercises.grader.ranks import RankResult
from minisgl.kvcache.radix_tree import RadixNode, RadixTree

MATCH, EVICT = "11-kv-memory/match", "11-kv-memory/evict"
Op = tuple[str, list[int]]  # ("insert" | "match" | "lock", token ids)


def build(page_size: int, ops: list[Op]) -> RadixTree:
    """A tree after `ops`, through the engine's own methods; the same ops always give the same tree
    (node ids, page ids, clocks), so a test can build a twin to compute the expected answer on."""
    tree, next_page = RadixTree(page_size), 1
    for op, tokens in ops:
        if op == "insert":
            num = len(tokens) // page_size
            tree.insert(tokens[: num * page_size], list(range(next_page, next_page + num)))
            next_page += num
        else:
            node, _ = tree.match(tokens)
            if op == "lock":
                tree.lock(node)
    return tree


def after(result: RankResult, key: str = "trees") -> RadixTree:
    """The tree as the learner's call left it (rebuilt from what its worker sent)."""
    return tree_from_reply(result.extra[key][0])


def nodes(tree: RadixTree) -> list[RadixNode]:
    out, stack = [], list(tree.root.children.values())
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(node.children.values())
    return sorted(out, key=lambda n: n.id)


def shape(tree: RadixTree) -> list[tuple]:
    """Everything but the clocks: which node holds which tokens and pages where, and its locks."""
    return [(n.id, tuple(n.key), tuple(n.pages), n.parent.id if n.parent else None, n.lock_ref,
             tuple(sorted(c.id for c in n.children.values()))) for n in nodes(tree)]


def random_ops(rng: random.Random, page_size: int) -> list[Op]:
    """Conversations over a few shared stems, some matched again later, some locked."""
    stems = [[rng.randrange(5) for _ in range(rng.randrange(1, 4) * page_size)] for _ in range(3)]
    ops: list[Op] = []
    for _ in range(rng.randrange(6, 14)):
        tokens = rng.choice(stems) + [rng.randrange(5) for _ in range(rng.randrange(0, 4) * page_size + 1)]
        ops.append(("insert", tokens))
        if rng.random() < 0.4:
            ops.append((rng.choice(["match", "match", "lock"]), rng.choice(stems) + [rng.randrange(5)]))
    return ops


# A page-size-2 tree: [1 2|3 4] -> {[5 6], [7 8|9 9]}, and [9 9] beside it.
HAND_OPS: list[Op] = [("insert", [1, 2, 3, 4, 5, 6]), ("insert", [1, 2, 3, 4, 7, 8, 9, 9]), ("insert", [9, 9])]


def _expect_pages(tree: RadixTree, twin: RadixTree, tokens: list[int], impl: str, note: str = "") -> list[int]:
    want = twin.match(tokens)[1]
    got = adapters.match_prefix(impl, tree, tokens).value
    if got != want:
        raise WrongAnswer(f"match_prefix(tree, {tokens}) with page_size {tree.page_size} returned {got!r}; the "
                          f"cached prefix is held in pages {want} {note}".rstrip())
    return got


@pytest.mark.task(MATCH)
def test_match_returns_the_pages_of_the_longest_cached_prefix(impl):
    tree, twin = build(2, HAND_OPS), build(2, HAND_OPS)
    for tokens in ([1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 7, 8, 9, 9, 0], [9, 9, 9], [4, 4], []):
        _expect_pages(tree, twin, tokens, impl)
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    for page_size in (1, 2, 3):
        ops = random_ops(rng, page_size)
        tree, twin = build(page_size, ops), build(page_size, ops)
        for _ in range(8):
            tokens = rng.choice([t for op, t in ops]) + [rng.randrange(5) for _ in range(rng.randrange(3))]
            _expect_pages(tree, twin, tokens[: rng.randrange(len(tokens) + 1)], impl, f"(random tree, seed {seed})")


@pytest.mark.task(MATCH)
def test_match_counts_whole_pages_only(impl):
    tree, twin = build(2, HAND_OPS), build(2, HAND_OPS)
    _expect_pages(tree, twin, [1, 2, 3], impl, "(token 3 starts a page it does not fill: it is not cached)")
    _expect_pages(tree, twin, [1], impl, "(less than one page matches nothing)")
    _expect_pages(tree, twin, [1, 2, 3, 4, 7, 8, 9], impl, "(9 alone fills no page)")


@pytest.mark.task(MATCH)
def test_match_stops_inside_an_edge(impl):
    tree, twin = build(1, [("insert", [1, 2, 3, 4, 5])]), build(1, [("insert", [1, 2, 3, 4, 5])])
    _expect_pages(tree, twin, [1, 2, 9], impl, "(the match ends inside the edge [1 2 3 4 5]: its first two pages)")
    tree, twin = build(2, HAND_OPS), build(2, HAND_OPS)
    _expect_pages(tree, twin, [1, 2, 0, 0], impl, "(the match ends inside the edge [1 2|3 4]: its first page)")


@pytest.mark.task(MATCH)
def test_match_stamps_every_node_it_goes_into(impl):
    for tokens, path in (([1, 2, 3, 4, 7, 8, 0, 0], ([1, 2, 3, 4], [7, 8, 9, 9])), ([1, 2, 5, 5], ([1, 2, 3, 4],)),
                         ([0, 0, 1, 2], ())):
        tree = build(2, HAND_OPS)
        before = {n.id: n.last_access for n in nodes(tree)}
        clock = tree.clock
        tree = after(adapters.match_prefix(impl, tree, tokens))
        if tree.clock != clock + 1:
            raise WrongAnswer(f"match_prefix must tick tree.clock once: it went from {clock} to {tree.clock}")
        for node in nodes(tree):
            on_path = node.key in [list(p) for p in path]
            want = tree.clock if on_path else before[node.id]
            if node.last_access != want:
                what = "a node the match went into" if on_path else "a node the match never entered"
                raise WrongAnswer(f"match_prefix(tree, {tokens}): {what} (key {node.key}) has last_access "
                                  f"{node.last_access}, expected {want}")


@pytest.mark.task(MATCH)
def test_match_changes_nothing_else_and_returns_its_own_list(impl):
    for tokens in ([1, 2, 3, 4], [1, 2, 3, 4, 5, 6], [9, 9], [1, 2, 3, 0]):
        tree = build(2, HAND_OPS)
        before = shape(tree)
        result = adapters.match_prefix(impl, tree, tokens)
        got = result.value
        if shape(after(result)) != before:
            raise WrongAnswer(f"match_prefix(tree, {tokens}) changed the tree (a node added, removed, split, or a "
                              "page list touched); it may only move the clock and stamp last_access")
        if not isinstance(got, list):
            raise WrongAnswer(f"match_prefix returned {type(got).__name__}, expected a list of page ids")
        # the worker appended -1 to the list it got back, as the scheduler appends its own pages
        if shape(after(result, "trees_after_append")) != before:
            raise WrongAnswer(f"match_prefix(tree, {tokens}) returned a node's own page list: appending to the "
                              "result changed the tree; return a list of your own")


def _evict(impl: str, tree: RadixTree, num_pages: int, twin: RadixTree, note: str = "") -> RadixTree:
    """The tree after the learner's evict (checked against the engine's on the twin)."""
    want = twin.evict(num_pages)
    result = adapters.evict(impl, tree, num_pages)
    got, tree = result.value, after(result)
    if got != want:
        raise WrongAnswer(f"evict(tree, {num_pages}) returned {got!r}, expected pages {want} in this order {note}"
                          .rstrip())
    try:
        tree.check()
    except Exception as error:  # noqa: BLE001 - AssertionError, or whatever a broken tree makes check() raise
        raise WrongAnswer(f"after evict(tree, {num_pages}) tree.check() fails: {error}") from None
    if shape(tree) != shape(twin):
        raise WrongAnswer(f"evict(tree, {num_pages}) returned the right pages but left the tree in another shape "
                          "(a node still listed in its parent's children, or a lock or page list changed)")
    return tree


def _hand(page_size: int, ops: list[Op], stamps: dict[tuple[int, ...], int] | None = None) -> RadixTree:
    tree = build(page_size, ops)
    for node in nodes(tree):
        node.last_access = (stamps or {}).get(tuple(node.key), node.last_access)
    return tree


LEAVES = [("insert", [1, 2]), ("insert", [3, 4]), ("insert", [5, 6])]  # three leaves of one page each


@pytest.mark.task(EVICT)
def test_evict_least_recently_used_first(impl):
    stamps = {(1, 2): 7, (3, 4): 2, (5, 6): 5}
    tree, twin = _hand(2, LEAVES, stamps), _hand(2, LEAVES, stamps)
    _evict(impl, tree, 2, twin, "(last_access 2, then 5: the least recently used go first)")


@pytest.mark.task(EVICT)
def test_evict_breaks_ties_by_the_oldest_node(impl):
    stamps = {(1, 2): 4, (3, 4): 4, (5, 6): 4}
    tree, twin = _hand(2, LEAVES, stamps), _hand(2, LEAVES, stamps)
    _evict(impl, tree, 1, twin, "(all last_access 4: the smallest id goes first)")


@pytest.mark.task(EVICT)
def test_evict_stops_once_it_has_enough(impl):
    ops = [("insert", [1, 1, 2, 2, 3, 3]), ("insert", [4, 4]), ("insert", [5, 5])]
    tree, twin = build(2, ops), build(2, ops)
    _evict(impl, tree, 2, twin, "(the first node holds 3 pages: enough, nothing more goes)")
    tree, twin = build(2, ops), build(2, ops)
    _evict(impl, tree, 100, twin, "(fewer pages than asked: every one that may go)")


@pytest.mark.task(EVICT)
def test_evict_takes_nothing_for_zero_pages(impl):
    for count in (0, -3):
        tree, twin = build(2, LEAVES), build(2, LEAVES)
        _evict(impl, tree, count, twin)


@pytest.mark.task(EVICT)
def test_evict_never_takes_a_locked_node(impl):
    ops = HAND_OPS + [("lock", [1, 2, 3, 4, 7, 8, 9, 9])]
    tree, twin = build(2, ops), build(2, ops)
    _evict(impl, tree, 100, twin, "(the path [1 2 3 4 7 8 9 9] is locked by a running request)")


@pytest.mark.task(EVICT)
def test_evict_lets_a_parent_follow_its_last_child(impl):
    ops = [("insert", [1, 2, 3, 4]), ("insert", [1, 2, 5, 6]), ("insert", [7, 7, 7, 7, 7, 7])]
    stamps = {(1, 2): 1, (3, 4): 2, (5, 6): 3, (7, 7, 7, 7, 7, 7): 9}
    tree, twin = _hand(2, ops, stamps), _hand(2, ops, stamps)
    _evict(impl, tree, 3, twin, "([3 4], then [5 6]; then their parent [1 2] is a leaf, older than [7 ...])")


@pytest.mark.task(EVICT)
def test_evict_random_trees(impl):
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    for page_size in (1, 2, 3):
        ops = random_ops(rng, page_size)
        tree, twin = build(page_size, ops), build(page_size, ops)
        for _ in range(3):
            tree = _evict(impl, tree, rng.randrange(1, 6), twin, f"(random tree, page_size {page_size}, seed {seed})")
