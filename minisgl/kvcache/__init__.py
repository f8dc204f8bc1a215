"""Where keys and values live between steps: a pool of fixed-size pages, handed to requests
(chapters 07 and 08)."""

from .page_pool import KVCachePool, PageAllocator, OutOfPagesError

__all__ = ["KVCachePool", "OutOfPagesError", "PageAllocator"]
