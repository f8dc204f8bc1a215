"""The paged KV cache of one rank: one big K and one big V buffer per layer, cut into pages of
`page_size` token slots, and the allocator that hands pages to requests (chapters 07 and 08).

A request's page table (`Req.pages`) maps its token position p to slot
`pages[p // page_size] * page_size + p % page_size`. Each rank stores only its local KV heads, so
TP divides the cache's size per token by tp (or less, when KV heads are replicated).
"""

from __future__ import annotations

import torch


class OutOfPagesError(RuntimeError):
    pass


class PageAllocator:
    """Free-list of page ids. Page 0 is never handed out: padded rows may point at it harmlessly."""

    def __init__(self, num_pages: int) -> None:
        if num_pages < 2:
            raise ValueError(f"the KV cache needs at least 2 pages, got {num_pages}; raise the KV memory budget")
        self.num_pages = num_pages
        self._free = list(range(num_pages - 1, 0, -1))  # pop() hands out low ids first

    @property
    def num_free(self) -> int:
        return len(self._free)

    def allocate(self, count: int) -> list[int]:
        if count > len(self._free):
            raise OutOfPagesError(f"need {count} KV pages, {len(self._free)} free")
        return [self._free.pop() for _ in range(count)]

    def free(self, pages: list[int]) -> None:
        self._free.extend(reversed(pages))


class KVCachePool:
    """K and V buffers [num_layers, num_pages * page_size, local_kv_heads, head_dim]."""

    def __init__(
        self,
        num_layers: int,
        num_pages: int,
        page_size: int,
        local_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device,
    ) -> None:
        self.page_size = page_size
        self.num_slots = num_pages * page_size
        shape = (num_layers, self.num_slots, local_kv_heads, head_dim)
        self.k_buffer = torch.zeros(shape, dtype=dtype, device=device)
        self.v_buffer = torch.zeros(shape, dtype=dtype, device=device)
        self.allocator = PageAllocator(num_pages)

    @staticmethod
    def bytes_per_token(num_layers: int, local_kv_heads: int, head_dim: int, dtype: torch.dtype) -> int:
        return 2 * num_layers * local_kv_heads * head_dim * dtype.itemsize

    def pages_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.page_size)

    def slots(self, pages: list[int], start: int, end: int) -> list[int]:
        """KV slots of token positions [start, end) of a request with page table `pages`."""
        size = self.page_size
        return [pages[p // size] * size + p % size for p in range(start, end)]

    def slot_tensor(self, pages: list[int], end: int) -> torch.Tensor:
        """Slots of token positions [0, end) as a tensor: the vectorized form of `slots`."""
        offsets = torch.arange(self.page_size)
        return (torch.tensor(pages)[:, None] * self.page_size + offsets).flatten()[:end]  # [end]

    def store(self, layer_id: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Write new tokens' K/V: k, v [tokens, local_kv_heads, head_dim] into `slots` [tokens], in the
        cache's dtype (a bf16 cache under fp32 activations rounds them here)."""
        self.k_buffer[layer_id].index_copy_(0, slots, k.to(self.k_buffer.dtype))
        self.v_buffer[layer_id].index_copy_(0, slots, v.to(self.v_buffer.dtype))
