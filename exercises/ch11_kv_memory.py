"""Chapter 11 (KV memory and the radix cache): the two walks of the radix tree the prefix cache
leans on, written against the engine's own tree (`minisgl/kvcache/radix_tree.py`).

What a tree gives you: `tree.root` (a node that holds no tokens), `tree.page_size`, `tree.clock`,
`tree.num_pages` (pages the tree holds) and `tree.num_evictable` (those in nodes with lock_ref 0).
Every other node has:
- `key`: its token ids, a whole number of pages of them;
- `pages`: one KV page id per `page_size` tokens of `key`, in order;
- `parent`, and `children`: a dict from the tuple of the first `page_size` token ids of each
  child's key to that child (two children never start with the same page);
- `lock_ref`: how many running requests use the node; > 0 means it must stay;
- `last_access`: the clock value when a match (or an insert) last went through it;
- `id`: its creation number (older nodes have smaller ids).

May use: those attributes, `minisgl.kvcache.radix_tree.common_prefix_len`, and plain Python
(`heapq` included). Not `RadixTree.match` nor `RadixTree.evict`: they are what you write.
"""

from __future__ import annotations

from minisgl.kvcache.radix_tree import RadixTree


def match_prefix(tree: RadixTree, token_ids: list[int]) -> list[int]:
    """Task 11-kv-memory/match: the page ids that hold the longest prefix of `token_ids` the tree
    caches, in whole pages.

    - Walk from the root: the child to follow is the one keyed by the next page of `token_ids`.
      A child's key may match only in part; then take the pages of its leading whole pages that
      match, and stop there.
    - Only whole pages count: a prefix shorter than one page matches nothing (`[]`).
    - Tick `tree.clock` once (+1) per call, and set `last_access` to the new clock value on every
      node the match went into, the partly matched one included: that is what makes eviction
      least-recently-used.
    - Change nothing else: no node added, removed or split, no page list touched. Return a list of
      your own (the caller appends its own pages to it).
    """
    raise NotImplementedError("11-kv-memory/match")


def evict(tree: RadixTree, num_pages: int) -> list[int]:
    """Task 11-kv-memory/evict: take at least `num_pages` pages out of the tree (every page that
    may go, if there are fewer) and return their ids, node by node in the order the nodes went,
    each node's pages in their order.

    - Only a leaf (no children) with `lock_ref == 0` may go; the least recently used goes first:
      smallest `last_access`, ties to the smallest `id`.
    - A node goes whole, so you may take out more pages than asked. Stop as soon as you have
      taken out at least `num_pages`; `num_pages <= 0` takes out nothing: `[]`.
    - A parent whose last child went is a leaf from then on, and competes like any other leaf
      (the root never goes).
    - Remove each node from its parent's `children`, and keep `tree.num_pages` and
      `tree.num_evictable` equal to what the tree holds: `tree.check()` must pass afterwards.
    """
    raise NotImplementedError("11-kv-memory/evict")
