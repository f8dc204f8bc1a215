"""How one scheduler spends its KV pages (chapter 11): a request is admitted with pages for its
prompt only (less what the prefix cache lends it), and a running request gets one more page each
time its next token crosses a page boundary.

Admission still looks ahead, or the first decode steps would run out at once: every admitted
request is expected to need `ratio * min(tokens it may still generate, ESTIMATE_CLIP)` more
tokens soon, and a new request is admitted only if its prompt plus its own estimate plus everyone
else's fit in the pages the cache can hand out. The ratio follows SGLang's "new token ratio": it
starts at RATIO_INIT, falls by RATIO_DECAY every decode step down to RATIO_MIN (requests finish
before their `max_tokens`, so the estimate can shrink), and goes back to 1 when a decode step
runs out of pages anyway and requests had to be retracted.

A request can never hold more tokens than the cache (`capacity`): prompt plus `max_tokens` is
capped there, as it is at the context length, so a budget smaller than the context shortens a
request that gives no `max_tokens` instead of refusing it (SGLang caps `max_new_tokens` the same
way, at `max_req_len` in its scheduler; vLLM refuses to start instead). A warning at start-up says
so.

Everything here is arithmetic on the scheduler's own state, so every TP rank computes the same
numbers and takes the same decisions.
"""

from __future__ import annotations

import logging
import math

from minisgl.core import Req, RequestError
from minisgl.kvcache import KVCachePool, PrefixCache

logger = logging.getLogger(__name__)

ESTIMATE_CLIP = 256  # tokens: a request is never expected to need more than this many "soon"
RATIO_INIT = 0.7
RATIO_MIN = 0.1
RATIO_DECAY = (RATIO_INIT - RATIO_MIN) / 500  # per decode step: from INIT to MIN in 500 steps


class KVBudget:
    def __init__(self, cache: PrefixCache, pool: KVCachePool) -> None:
        self.cache = cache
        self.pool = pool
        self.new_token_ratio = RATIO_INIT
        self.prompt_tokens = 0  # tokens of every admission's prefill (a retracted request counts again)
        self.cached_tokens = 0  # of those, found in the prefix cache

    @property
    def capacity(self) -> int:
        """Tokens one request can hold at most: every page but the reserved one."""
        return (self.pool.allocator.num_pages - 1) * self.pool.page_size

    def max_total_len(self, prompt_len: int, max_tokens: int) -> int:
        """Prompt plus `max_tokens`, capped at `capacity`; a `RequestError` when the prompt leaves
        no room there for one new token."""
        if prompt_len >= self.capacity:
            raise RequestError(f"the prompt has {prompt_len} tokens; the KV cache holds {self.capacity} (prompt plus "
                               "at least one new token): shorten the prompt or raise --num-pages / --kv-memory-gb")
        return min(prompt_len + max_tokens, self.capacity)

    def warn_if_below(self, context_len: int) -> None:
        """Say at start-up when one request cannot use the whole context."""
        if self.capacity < context_len:
            logger.warning("the KV cache holds %d tokens, less than the model's context of %d: a request's prompt "
                           "plus output is capped at %d tokens; raise --num-pages or --kv-memory-gb for more",
                           self.capacity, context_len, self.capacity)

    def reserve(self, req: Req) -> int:
        """Pages `req` is expected to need soon beyond the pages it holds (its prompt included,
        before admission)."""
        remaining = req.max_total_len - req.total_len
        expected = min(remaining, math.ceil(self.new_token_ratio * min(remaining, ESTIMATE_CLIP)))
        return max(0, self.pool.pages_for(req.total_len + expected) - len(req.pages))

    def admit(self, req: Req, reserved: int) -> bool:
        """Give `req` its cached prefix and the pages for the rest of its tokens, if that and its
        estimate fit next to the `reserved` pages of the requests already admitted; else change
        nothing and return False."""
        matched = self.cache.match(req)  # borrows (locks) the prefix: no longer evictable
        if self.reserve(req) + reserved > self.cache.available:
            self.cache.release(req)
            return False
        req.pages += self.cache.allocate(self.pool.pages_for(req.total_len) - len(req.pages))
        self.prompt_tokens += req.total_len
        self.cached_tokens += matched
        return True

    def missing_pages(self, reqs: list[Req]) -> int:
        """Pages a decode step of `reqs` needs: one for each request whose next token (at position
        total_len - 1) starts a new page."""
        return sum(len(req.pages) * self.pool.page_size < req.total_len for req in reqs)

    def grow(self, reqs: list[Req]) -> None:
        """Hand out the pages `missing_pages(reqs)` counted, in `reqs` order (the same on every rank)."""
        for req in reqs:
            if len(req.pages) * self.pool.page_size < req.total_len:
                req.pages += self.cache.allocate(1)
        self.new_token_ratio = max(RATIO_MIN, self.new_token_ratio - RATIO_DECAY)

    def retracted(self) -> None:
        """A decode step ran out of pages: expect the worst again."""
        self.new_token_ratio = 1.0
