"""The radix tree and the prefix caches on their own, without a model: matches at page granularity,
splits, locks, LRU eviction, and a randomized workload that checks the tree's integrity and that
every borrowed page really holds the tokens it is borrowed for."""

from __future__ import annotations

import random

import pytest

from minisgl.core import Req, SamplingParams
from minisgl.kvcache import NaiveCache, OutOfPagesError, PageAllocator, RadixCache, RadixTree


def _req(tokens: list[int], uid: int = 0) -> Req:
    return Req(uid, list(tokens), SamplingParams(temperature=0), len(tokens) + 8)


def test_match_splits_an_edge_and_locks_the_path() -> None:
    tree = RadixTree(page_size=2)
    assert tree.insert([1, 2, 3, 4, 5, 6], [10, 11, 12])[0] == 0
    node, pages = tree.match([1, 2, 3, 4, 9, 9, 7])  # the last odd token is never part of a page
    assert pages == [10, 11] and node.key == [1, 2, 3, 4]
    assert [child.key for child in node.children.values()] == [[5, 6]]
    tree.lock(node)
    assert (tree.num_pages, tree.num_evictable) == (3, 1)
    assert tree.evict(10) == [12]  # the locked prefix stays
    tree.unlock(node)
    assert tree.evict(10) == [10, 11] and tree.num_pages == 0
    assert tree.check()


def test_a_match_ending_inside_a_page_stops_before_it() -> None:
    tree = RadixTree(page_size=4)
    tree.insert([1, 2, 3, 4, 5, 6, 7, 8], [3, 4])
    assert tree.match([1, 2, 3, 4, 5, 6, 7, 0])[1] == [3]
    assert tree.match([1, 2, 3, 0])[1] == []


def test_insert_reports_the_cached_prefix_and_keeps_its_own_pages() -> None:
    tree = RadixTree(page_size=1)
    tree.insert([1, 2, 3], [5, 6, 7])
    assert tree.insert([1, 2, 9, 9], [8, 9, 10, 11])[0] == 2  # pages 8, 9 are the caller's duplicates
    assert tree.match([1, 2, 9, 9])[1] == [5, 6, 10, 11]
    already, node = tree.insert([1, 2], [12, 13])  # ends inside an edge: nothing new, the edge splits there
    assert already == 2 and node.key == [1, 2] and node.pages == [5, 6]
    assert tree.num_pages == 5 and tree.check()


def test_eviction_is_least_recently_used_leaf_first() -> None:
    tree = RadixTree(page_size=1)
    tree.insert([1, 2], [1, 2])
    tree.insert([1, 3], [3, 4])  # splits [1, 2]: [1] -> {[2], [3]}
    tree.insert([5], [5])
    tree.match([1, 2])  # [1] and [2] are now newer than [3] and [5]
    assert tree.evict(1) == [4]
    assert tree.evict(1) == [5]
    assert tree.evict(2) == [2, 1]  # the parent became a leaf, and goes next
    assert tree.check()


def test_check_catches_a_broken_counter() -> None:
    tree = RadixTree(page_size=1)
    tree.insert([1, 2], [1, 2])
    tree.num_evictable += 1
    with pytest.raises(AssertionError, match="counters"):
        tree.check()


def test_release_caches_whole_pages_and_frees_the_rest() -> None:
    allocator = PageAllocator(16)
    cache = RadixCache(allocator, page_size=4)
    first = _req(list(range(10)))
    assert cache.match(first) == 0
    first.pages += cache.allocate(3)
    first.cached_len = 10
    cache.release(first)  # 2 full pages cached, the partial third freed
    assert (cache.tree.num_pages, allocator.num_free) == (2, 13)
    second = _req(list(range(8)) + [99])
    assert cache.match(second) == 8 and second.pages == cache.tree.match(list(range(8)))[1]
    assert cache.num_evictable == 0  # borrowed by `second`
    # a prompt made of cached pages only still computes its last page's last token
    assert cache.match(_req(list(range(8)), uid=1)) == 4
    assert cache.check()


def test_a_computed_prompt_is_shared_while_its_request_runs() -> None:
    allocator = PageAllocator(16)
    cache = RadixCache(allocator, page_size=2)
    first, second = _req([1, 2, 3, 4, 5]), _req([1, 2, 3, 4, 6], uid=1)
    for req in (first, second):  # admitted in the same step: nothing to share yet
        assert cache.match(req) == 0
        req.pages += cache.allocate(3)
        req.cached_len = 5
    cache.cache_prompt(first)  # its two full pages join the tree, locked by `first`
    cache.cache_prompt(second)  # the tree has these tokens already: `second` keeps its own copy
    assert cache.tree.num_pages == 2 and cache.num_evictable == 0
    third = _req([1, 2, 3, 4, 7], uid=2)
    assert cache.match(third) == 4 and third.pages == first.pages[:2]
    for req in (first, second, third):
        cache.release(req)
    assert allocator.num_free + cache.tree.num_pages == 15 and cache.num_evictable == 2
    assert cache.check()


def test_a_request_waits_a_step_for_a_long_prefix_computed_in_the_same_batch() -> None:
    cache = RadixCache(PageAllocator(64), page_size=1)
    document = list(range(40))
    first = _req(document + [1])
    cache.match(first)
    assert cache.should_wait(_req(document + [2]), [first])
    assert not cache.should_wait(_req(document[:20] + [2]), [first])  # 20 shared tokens: not worth a step
    assert not NaiveCache(PageAllocator(64), page_size=1).should_wait(_req(document + [2]), [first])


def test_allocate_evicts_only_what_it_needs() -> None:
    allocator = PageAllocator(5)  # pages 1..4
    cache = RadixCache(allocator, page_size=1)
    for tokens in ([1, 2], [3, 4]):
        req = _req(tokens)
        cache.match(req)
        req.pages += cache.allocate(2)
        req.cached_len = 2
        cache.release(req)
    assert allocator.num_free == 0 and cache.available == 4
    assert len(cache.allocate(2)) == 2  # evicts the older sequence, [1, 2]
    assert cache.tree.match([3, 4])[1] != [] and cache.tree.match([1, 2])[1] == []
    with pytest.raises(OutOfPagesError):
        cache.allocate(3)


def test_naive_cache_shares_nothing() -> None:
    allocator = PageAllocator(8)
    cache = NaiveCache(allocator, page_size=1)
    req = _req([1, 2, 3])
    assert cache.match(req) == 0
    req.pages += cache.allocate(3)
    cache.release(req)
    assert allocator.num_free == 7 and cache.match(_req([1, 2, 3])) == 0


@pytest.mark.parametrize("page_size", [1, 3])
@pytest.mark.parametrize("seed", range(4))
def test_random_workload_keeps_the_tree_consistent(page_size: int, seed: int) -> None:
    """Requests over a few shared prefixes come and go at random in a small pool (so eviction
    runs often); after every operation the tree checks out, no page is lost or held twice, and
    every page a request borrows holds exactly the tokens it is borrowed for."""
    rng = random.Random(seed)
    num_pages = 40
    allocator = PageAllocator(num_pages)
    cache = RadixCache(allocator, page_size)
    content: dict[int, tuple[int, ...]] = {}  # page -> the tokens whose K/V a request wrote into it
    stems = [[rng.randrange(4) for _ in range(rng.randrange(1, 12))] for _ in range(4)]
    live: dict[Req, int] = {}  # request -> pages it borrowed from the tree
    evictions = 0
    for step in range(400):
        if live and (rng.random() < 0.45 or cache.available < 12):
            req = rng.choice(list(live))
            borrowed = live.pop(req)
            req.cached_len = rng.randrange(req.cached_len, req.total_len + 1)  # how far it got
            for index in range(borrowed, req.cached_len // page_size):  # its own pages it filled
                content[req.pages[index]] = tuple(req.input_ids[index * page_size : (index + 1) * page_size])
            cache.release(req)
        else:
            tokens = rng.choice(stems) + [rng.randrange(4) for _ in range(rng.randrange(1, 8))]
            req = _req(tokens, uid=step)
            matched = cache.match(req)
            assert matched % page_size == 0 and matched < len(tokens)
            for index, page in enumerate(req.pages):
                assert content[page] == tuple(tokens[index * page_size : (index + 1) * page_size])
            need = -(-len(tokens) // page_size) - len(req.pages)
            if need > cache.available:
                cache.release(req)
                continue
            evictions += need > allocator.num_free
            own = cache.allocate(need)
            for page in own:
                content.pop(page, None)  # a fresh page holds nothing yet
            live[req] = len(req.pages)
            req.pages += own
            if rng.random() < 0.5:  # its prompt was computed: the tree may take its pages now
                req.cached_len = req.total_len
                for index in range(live[req], len(tokens) // page_size):
                    content[req.pages[index]] = tuple(tokens[index * page_size : (index + 1) * page_size])
                cache.cache_prompt(req)
                live[req] = cache._shared[req][1]
        assert cache.check()
        own_pages = [p for r, borrowed in live.items() for p in r.pages[borrowed:]]
        assert len(own_pages) == len(set(own_pages))
        assert allocator.num_free + cache.tree.num_pages + len(own_pages) == num_pages - 1  # no page lost
    assert evictions > 10  # the pool was small enough to exercise eviction
