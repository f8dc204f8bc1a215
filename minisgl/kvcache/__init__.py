"""Where keys and values live between steps: a pool of fixed-size pages handed to requests
(chapters 07 and 08), and the prefix cache that lets requests share the pages of a common prefix
(chapter 11)."""

from .page_pool import KVCachePool, OutOfPagesError, PageAllocator
from .prefix_cache import CACHES, NaiveCache, PrefixCache, RadixCache, create_prefix_cache
from .radix_tree import RadixNode, RadixTree

__all__ = [
    "CACHES",
    "KVCachePool",
    "NaiveCache",
    "OutOfPagesError",
    "PageAllocator",
    "PrefixCache",
    "RadixCache",
    "RadixNode",
    "RadixTree",
    "create_prefix_cache",
]
