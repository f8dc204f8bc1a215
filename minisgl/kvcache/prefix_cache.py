"""The cache policy between the scheduler and the page allocator: which pages a new request can
borrow from earlier ones, and what happens to a request's pages when it leaves (chapter 11).

- `RadixCache` (the default, `--cache radix`): a request starts from the longest cached prefix of
  its tokens (`RadixTree.match`), its own pages hold the rest. Once its prompt is computed, the
  prompt goes into the tree, so requests admitted while it still runs share it; when it leaves,
  its output goes in too (a chat's next turn starts with it). Pages of the tree that no running
  request uses are evicted, least recently used first, when the allocator runs short.
- `NaiveCache` (`--cache naive`): every request computes its whole prompt and frees everything
  when it leaves. The reference the radix cache must agree with, token for token.

A request borrows whole pages only, and never its last token: the prefill must compute at least
that one, since its logits give the first new token. Requests that arrive together with a common
prefix (32 questions over one document) would all compute it in the same batch, before any of them
is cached: so a request that shares at least SHARE_MIN_TOKENS uncached tokens with a request
admitted in the same step waits one step (`should_wait`), and then finds them in the tree.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from minisgl.core import Req

from .page_pool import OutOfPagesError, PageAllocator
from .radix_tree import RadixNode, RadixTree, common_prefix_len

CACHES = ("radix", "naive")
SHARE_MIN_TOKENS = 32  # a shared prefix shorter than this is not worth a step's wait


class PrefixCache(ABC):
    def __init__(self, allocator: PageAllocator, page_size: int) -> None:
        self.allocator = allocator
        self.page_size = page_size

    @property
    def num_evictable(self) -> int:
        """Pages cached for later requests that no running request uses: free on demand."""
        return 0

    @property
    def available(self) -> int:
        """Pages `allocate` can hand out now: free ones plus evictable ones."""
        return self.allocator.num_free + self.num_evictable

    def allocate(self, count: int) -> list[int]:
        """`count` fresh pages, evicting cached ones if the allocator runs short."""
        if count > self.allocator.num_free:
            self.allocator.free(self._evict(count - self.allocator.num_free))
        if count > self.allocator.num_free:
            raise OutOfPagesError(f"need {count} KV pages, {self.allocator.num_free} free after eviction")
        return self.allocator.allocate(count)

    @abstractmethod
    def match(self, req: Req) -> int:
        """Start `req` from its longest cached prefix: set `req.pages` (borrowed, locked) and
        `req.cached_len`; returns the number of tokens matched."""

    def cache_prompt(self, req: Req) -> None:
        """`req`'s prompt is computed (its K/V in `req.pages`): offer it to later requests."""

    def should_wait(self, req: Req, admitted: list[Req]) -> bool:
        """Whether `req` had better wait a step: it would compute a prefix that a request
        `admitted` in this step computes too."""
        return False

    @abstractmethod
    def release(self, req: Req) -> None:
        """`req` leaves (finished, aborted or retracted): keep what is worth caching, free the rest of
        its pages, unlock what it borrowed. Afterwards `req.pages` is empty and `req.cached_len` 0."""

    def check(self) -> bool:
        """True when the cache's own structure is consistent (the radix tree's `check`)."""
        return True

    def _evict(self, count: int) -> list[int]:
        return []


class NaiveCache(PrefixCache):
    def match(self, req: Req) -> int:
        req.pages, req.cached_len = [], 0
        return 0

    def release(self, req: Req) -> None:
        self.allocator.free(req.pages)
        req.pages, req.cached_len = [], 0


class RadixCache(PrefixCache):
    def __init__(self, allocator: PageAllocator, page_size: int) -> None:
        super().__init__(allocator, page_size)
        self.tree = RadixTree(page_size)
        # request -> (the node it locks, how many leading pages of req.pages the tree owns); the
        # request owns the rest of its pages
        self._shared: dict[Req, tuple[RadixNode, int]] = {}

    @property
    def num_evictable(self) -> int:
        return self.tree.num_evictable

    def match(self, req: Req) -> int:
        node, pages = self.tree.match(req.all_ids[: req.total_len - 1])  # the last token is always computed
        self.tree.lock(node)
        self._shared[req] = (node, len(pages))
        req.pages, req.cached_len = pages, len(pages) * self.page_size
        return req.cached_len

    def cache_prompt(self, req: Req) -> None:
        locked, shared = self._shared[req]
        num_full = req.cached_len // self.page_size
        tokens = req.all_ids[: num_full * self.page_size]
        if num_full == shared or len(self.tree.match(tokens)[1]) > shared:
            return  # nothing new, or another request cached these tokens meanwhile: keep our copy
        _, node = self.tree.insert(tokens, req.pages[:num_full])  # the tree takes pages [shared, num_full)
        self.tree.lock(node)
        self.tree.unlock(locked)
        self._shared[req] = (node, num_full)

    def should_wait(self, req: Req, admitted: list[Req]) -> bool:
        ids = req.all_ids
        # other.cached_len is what the tree gave `other`: the tokens it computes this step start there
        return any(common_prefix_len(ids, other.all_ids) - other.cached_len >= max(SHARE_MIN_TOKENS, self.page_size)
                   for other in admitted)

    def release(self, req: Req) -> None:
        locked, shared = self._shared.pop(req)
        # the tokens whose K/V are in req's pages, in whole pages; with overlap, token ids a step
        # still computes are placeholders (< 0): those are not cached
        known = req.all_ids[: req.cached_len]
        known_len = next((i for i, t in enumerate(known) if t < 0), len(known))
        num_full = known_len // self.page_size
        already, _ = self.tree.insert(known[: num_full * self.page_size], req.pages[:num_full])
        # req's own pages for tokens the tree had already (in pages of its own), and past the last
        # whole page (a partial page, or one allocated ahead), go back to the allocator
        self.allocator.free(req.pages[shared : already // self.page_size] + req.pages[num_full:])
        self.tree.unlock(locked)
        req.pages, req.cached_len = [], 0

    def check(self) -> bool:
        return self.tree.check()

    def _evict(self, count: int) -> list[int]:
        return self.tree.evict(count)


def create_prefix_cache(name: str, allocator: PageAllocator, page_size: int) -> PrefixCache:
    if name not in CACHES:
        raise ValueError(f"unknown cache {name!r}; available: {', '.join(CACHES)}")
    return RadixCache(allocator, page_size) if name == "radix" else NaiveCache(allocator, page_size)
