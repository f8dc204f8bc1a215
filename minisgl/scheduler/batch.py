"""Turn scheduling decisions (which requests, how many new tokens each) into a `Batch` of tensors
(chapter 06)."""

from __future__ import annotations

import torch

from minisgl.core import Batch, Req
from minisgl.kvcache import KVCachePool


def make_prefill_batch(reqs: list[Req], chunk_lens: list[int], pool: KVCachePool, device: torch.device) -> Batch:
    """The next `chunk_lens[i]` tokens of each request, after its `cached_len` cached ones (a
    retracted request's output so far is computed again with its prompt)."""
    input_ids: list[int] = []
    positions: list[int] = []
    slots: list[int] = []
    for req, chunk in zip(reqs, chunk_lens):
        start, end = req.cached_len, req.cached_len + chunk
        input_ids += req.all_ids[start:end]
        positions += range(start, end)
        slots += pool.slots(req.pages, start, end)
    return _to_batch("prefill", reqs, input_ids, positions, slots, [r.cached_len for r in reqs], chunk_lens, device)


def make_decode_batch(reqs: list[Req], pool: KVCachePool, device: torch.device) -> Batch:
    """One new token per request: its latest sampled token, at position total_len - 1."""
    input_ids = [req.output_ids[-1] for req in reqs]
    positions = [req.total_len - 1 for req in reqs]
    slots = [pool.slots(req.pages, p, p + 1)[0] for req, p in zip(reqs, positions)]
    return _to_batch("decode", reqs, input_ids, positions, slots, positions, [1] * len(reqs), device)


def _to_batch(
    phase: str,
    reqs: list[Req],
    input_ids: list[int],
    positions: list[int],
    slots: list[int],
    prefix_lens: list[int],
    extend_lens: list[int],
    device: torch.device,
) -> Batch:
    last_indices = torch.tensor(extend_lens).cumsum(0) - 1  # [num_reqs]
    return Batch(
        phase=phase,  # type: ignore[arg-type]
        reqs=reqs,
        input_ids=torch.tensor(input_ids, dtype=torch.int64, device=device),
        positions=torch.tensor(positions, dtype=torch.int64, device=device),
        out_slots=torch.tensor(slots, dtype=torch.int64, device=device),
        prefix_lens=prefix_lens,
        extend_lens=extend_lens,
        last_indices=last_indices.to(device),
    )
