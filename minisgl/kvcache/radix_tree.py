"""The radix tree of the prefix cache: token ids -> the KV pages that hold them, shared between
requests with a common prefix (chapter 11).

Each edge holds a run of token ids, a whole number of pages long, and the page ids that hold their
keys and values. The children of a node are keyed by the first page of their tokens, so two
children never start with the same page. Page granularity keeps it simple: a page belongs to
exactly one node, and a match never ends inside a page.

- `match` finds the longest cached prefix; a match that ends inside an edge splits it, so the
  returned node ends exactly where the match does.
- `lock` / `unlock` count, on every node from a node up to the root, the requests that use it:
  only nodes nobody locks may be evicted.
- `insert` adds a request's tokens and pages; it reports how many tokens were already cached
  (the caller's pages for those are duplicates, which it frees).
- `evict` frees unlocked leaves, least recently used first (a parent becomes a leaf in turn).

"Recently" is a logical clock that ticks on every match and insert, never the wall clock: every
TP rank runs the same operations in the same order, so every rank builds the same tree and
evicts the same pages, without a message between them.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator


def common_prefix_len(a: list[int], b: list[int]) -> int:
    """How many leading tokens `a` and `b` share."""
    n, limit = 0, min(len(a), len(b))
    while n < limit and a[n] == b[n]:
        n += 1
    return n


class RadixNode:
    __slots__ = ("children", "id", "key", "last_access", "lock_ref", "pages", "parent")

    def __init__(self, key: list[int], pages: list[int], parent: RadixNode | None, node_id: int) -> None:
        self.key = key  # token ids of this edge: len(pages) * page_size of them
        self.pages = pages  # KV page of each page_size tokens of `key`
        self.parent = parent
        self.children: dict[tuple[int, ...], RadixNode] = {}  # first page of the child's key -> child
        self.lock_ref = 0  # requests using this node (or a node below it)
        self.last_access = 0  # the tree's clock at the last match or insert through this node
        self.id = node_id  # creation order: breaks LRU ties the same way on every rank

    def __repr__(self) -> str:
        return f"RadixNode(id={self.id}, tokens={len(self.key)}, pages={self.pages}, lock_ref={self.lock_ref})"


class RadixTree:
    def __init__(self, page_size: int) -> None:
        self.page_size = page_size
        self._ids = itertools.count()
        self.root = RadixNode([], [], None, next(self._ids))
        self.clock = 0
        self.num_pages = 0  # pages held by the tree
        self.num_evictable = 0  # of those, pages in nodes no request locks

    # ---- lookups ---------------------------------------------------------------------------------
    def match(self, token_ids: list[int]) -> tuple[RadixNode, list[int]]:
        """The longest cached prefix of `token_ids`, in whole pages: (the node where it ends, the
        page ids of the prefix). The root and [] when nothing matches."""
        self.clock += 1
        node, pages, pos = self.root, [], 0
        end = len(token_ids) - len(token_ids) % self.page_size
        while pos < end:
            child = node.children.get(self._page_key(token_ids, pos))
            if child is None:
                break
            common = self._common_len(child.key, token_ids, pos, end)
            if common < len(child.key):
                child = self._split(child, common)
            child.last_access = self.clock
            pages += child.pages
            pos += common
            node = child
        return node, pages

    def insert(self, token_ids: list[int], pages: list[int]) -> tuple[int, RadixNode]:
        """Cache `token_ids` (a whole number of pages) held in `pages`. Returns how many leading
        tokens were cached already, and the node where `token_ids` end. The tree keeps its own
        pages for the tokens it had: the caller's pages[: returned // page_size] are duplicates."""
        assert len(token_ids) == len(pages) * self.page_size, "insert whole pages only"
        self.clock += 1
        node, pos, end = self.root, 0, len(token_ids)
        while pos < end:
            child = node.children.get(self._page_key(token_ids, pos))
            if child is None:
                leaf = RadixNode(token_ids[pos:], pages[pos // self.page_size :], node, next(self._ids))
                leaf.last_access = self.clock
                node.children[self._page_key(leaf.key, 0)] = leaf
                self.num_pages += len(leaf.pages)
                self.num_evictable += len(leaf.pages)
                return pos, leaf
            common = self._common_len(child.key, token_ids, pos, end)
            if common < len(child.key):
                child = self._split(child, common)
            child.last_access = self.clock
            pos += common
            node = child
        return end, node

    # ---- locks ---------------------------------------------------------------------------------------
    def lock(self, node: RadixNode) -> None:
        """A request uses the prefix that ends at `node`: nothing on its path may be evicted."""
        for n in self._path(node):
            if n.lock_ref == 0:
                self.num_evictable -= len(n.pages)
            n.lock_ref += 1

    def unlock(self, node: RadixNode) -> None:
        for n in self._path(node):
            n.lock_ref -= 1
            if n.lock_ref == 0:
                self.num_evictable += len(n.pages)

    # ---- eviction ------------------------------------------------------------------------------------
    def evict(self, num_pages: int) -> list[int]:
        """Remove unlocked leaves, least recently used first, until at least `num_pages` pages are
        out (or nothing more can go). Returns the page ids removed (whole nodes: maybe more)."""
        leaves = [(n.last_access, n.id, n) for n in self._nodes() if not n.children and n.lock_ref == 0]
        heapq.heapify(leaves)
        freed: list[int] = []
        while len(freed) < num_pages and leaves:
            _, _, leaf = heapq.heappop(leaves)
            parent = leaf.parent
            assert parent is not None
            del parent.children[self._page_key(leaf.key, 0)]
            freed += leaf.pages
            self.num_pages -= len(leaf.pages)
            self.num_evictable -= len(leaf.pages)
            if parent is not self.root and not parent.children and parent.lock_ref == 0:
                heapq.heappush(leaves, (parent.last_access, parent.id, parent))
        return freed

    # ---- integrity -----------------------------------------------------------------------------------
    def check(self) -> bool:
        """True, or AssertionError naming the first broken rule: every edge is whole pages keyed by
        its first page, lock counts never grow downwards, no page is held twice (nor page 0), and the
        page counters match the tree."""
        seen: set[int] = set()
        pages = evictable = 0
        for node in self._nodes():
            assert node.key and len(node.key) == len(node.pages) * self.page_size, f"{node}: not whole pages"
            assert node.parent is not None and node.parent.children.get(self._page_key(node.key, 0)) is node, (
                f"{node}: not under its first page in its parent")
            assert 0 <= node.lock_ref and (node.parent is self.root or node.lock_ref <= node.parent.lock_ref), (
                f"{node}: locked more often than its parent {node.parent}")
            assert 0 not in node.pages and seen.isdisjoint(node.pages), f"{node}: page 0 or a page held twice"
            seen.update(node.pages)
            pages += len(node.pages)
            evictable += len(node.pages) if node.lock_ref == 0 else 0
        assert (pages, evictable) == (self.num_pages, self.num_evictable), (
            f"counters say {self.num_pages} pages, {self.num_evictable} evictable; the tree has {pages}, {evictable}")
        return True

    # ---- helpers -------------------------------------------------------------------------------------
    def _page_key(self, token_ids: list[int], pos: int) -> tuple[int, ...]:
        return tuple(token_ids[pos : pos + self.page_size])

    def _common_len(self, key: list[int], token_ids: list[int], pos: int, end: int) -> int:
        """Tokens of `key` that token_ids[pos:end] repeats, rounded down to whole pages."""
        n = common_prefix_len(key, token_ids[pos:end])
        return n - n % self.page_size

    def _split(self, node: RadixNode, at: int) -> RadixNode:
        """Cut `node`'s edge after `at` tokens (a page boundary): a new parent takes the first part
        and `node` keeps the rest, below it. Returns the new parent, which inherits the locks."""
        assert node.parent is not None and 0 < at < len(node.key) and at % self.page_size == 0
        cut = at // self.page_size
        upper = RadixNode(node.key[:at], node.pages[:cut], node.parent, next(self._ids))
        upper.lock_ref, upper.last_access = node.lock_ref, node.last_access
        node.parent.children[self._page_key(upper.key, 0)] = upper
        node.key, node.pages, node.parent = node.key[at:], node.pages[cut:], upper
        upper.children[self._page_key(node.key, 0)] = node
        return upper

    def _path(self, node: RadixNode) -> Iterator[RadixNode]:
        """`node` and its ancestors, the root excluded."""
        while node is not self.root:
            yield node
            assert node.parent is not None
            node = node.parent

    def _nodes(self) -> Iterator[RadixNode]:
        """Every node but the root, parents before children."""
        stack = list(self.root.children.values())
        while stack:
            node = stack.pop()
            yield node
            stack.extend(node.children.values())
