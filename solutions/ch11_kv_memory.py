"""Chapter 11 reference: a longest-prefix match that stamps the path it walks, and least-recently-
used eviction of unlocked leaves, on the engine's RadixTree (its own match also splits the edge
where a match ends, so the scheduler can lock exactly the matched prefix)."""

from __future__ import annotations

import heapq

from minisgl.kvcache.radix_tree import RadixTree, common_prefix_len


def match_prefix(tree: RadixTree, token_ids: list[int]) -> list[int]:
    size = tree.page_size
    tree.clock += 1
    node, pages, pos = tree.root, [], 0
    while len(token_ids) - pos >= size:
        child = node.children.get(tuple(token_ids[pos:pos + size]))
        if child is None:
            break
        child.last_access = tree.clock
        whole = common_prefix_len(child.key, token_ids[pos:]) // size  # pages of this edge that match
        pages += child.pages[:whole]
        if whole * size < len(child.key):
            break  # the match ends inside this edge
        node, pos = child, pos + len(child.key)
    return pages


def evict(tree: RadixTree, num_pages: int) -> list[int]:
    leaves, stack = [], list(tree.root.children.values())
    while stack:
        node = stack.pop()
        stack.extend(node.children.values())
        if not node.children and node.lock_ref == 0:
            leaves.append((node.last_access, node.id, node))
    heapq.heapify(leaves)
    freed: list[int] = []
    while len(freed) < num_pages and leaves:
        _, _, leaf = heapq.heappop(leaves)
        parent = leaf.parent
        del parent.children[tuple(leaf.key[:tree.page_size])]
        freed += leaf.pages
        tree.num_pages -= len(leaf.pages)
        tree.num_evictable -= len(leaf.pages)
        if parent is not tree.root and not parent.children and parent.lock_ref == 0:
            heapq.heappush(leaves, (parent.last_access, parent.id, parent))
    return freed
