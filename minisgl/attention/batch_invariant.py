"""Batch-invariant attention in plain torch (`--deterministic`, chapter 16): a query's result depends
on its own request only, never on the batch around it or on how its prompt was chunked.

The torch backend pads every request to the batch's longest and calls SDPA once, so a row's softmax
runs over a length, and SDPA picks its blocking from a shape, that other requests decide. Here:
- queries are cut into tiles of `Q_TILE` rows of one request (the last one padded), and tiles are
  processed `TILE_GROUP` at a time (padded with empty tiles), so every matmul has one fixed shape;
- keys are cut into blocks of `KV_BLOCK` positions counted from position 0, walked in order with
  an online softmax (running max m, running sum l, running output acc, all in fp32). A block
  beyond a query's last key is masked out entirely and leaves m, l and acc exactly as they were,
  so the number of blocks a batch needs does not touch any row's arithmetic.
The price is Python looping over groups and blocks, and the padding rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from minisgl.core import Batch
from minisgl.kvcache import KVCachePool

from .base import AttentionBackend

Q_TILE = 8  # query rows of one request per tile
TILE_GROUP = 4  # tiles per matmul call
KV_BLOCK = 128  # key positions per online-softmax step


@dataclass
class BatchInvariantMetadata:
    rows: torch.Tensor  # [groups, TILE_GROUP, Q_TILE] row of each tile query in the flat token array
    valid: torch.Tensor  # [groups, TILE_GROUP, Q_TILE] which of them are real queries
    positions: torch.Tensor  # [groups, TILE_GROUP, Q_TILE] each query's position in its request (padding: 0)
    kv_slots: torch.Tensor  # [groups, TILE_GROUP, num_blocks * KV_BLOCK] pool slot of each key position


class BatchInvariantAttentionBackend(AttentionBackend):
    def __init__(self, pool: KVCachePool) -> None:
        self.pool = pool

    def prepare(self, batch: Batch) -> None:
        max_kv = max(p + e for p, e in zip(batch.prefix_lens, batch.extend_lens))
        num_keys = math.ceil(max_kv / KV_BLOCK) * KV_BLOCK
        tiles: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []  # (rows, positions, slots)
        start = 0
        for req, prefix, extend in zip(batch.reqs, batch.prefix_lens, batch.extend_lens):
            slots = torch.zeros(num_keys, dtype=torch.int64)  # keys past the request: slot 0, masked
            slots[: prefix + extend] = self.pool.slot_tensor(req.pages, prefix + extend)
            for first in range(0, extend, Q_TILE):
                count = min(Q_TILE, extend - first)
                rows = torch.zeros(Q_TILE, dtype=torch.int64)
                rows[:count] = torch.arange(start + first, start + first + count)
                positions = torch.full((Q_TILE,), -1, dtype=torch.int64)  # -1 marks padding
                positions[:count] = torch.arange(prefix + first, prefix + first + count)
                tiles.append((rows, positions, slots))
            start += extend
        no_rows = torch.zeros(Q_TILE, dtype=torch.int64)
        empty = (no_rows, torch.full((Q_TILE,), -1), torch.zeros(num_keys, dtype=torch.int64))
        tiles += [empty] * (-len(tiles) % TILE_GROUP)  # whole groups: every matmul has the same shape
        rows, positions, slots = (torch.stack(parts).view(-1, TILE_GROUP, *parts[0].shape) for parts in zip(*tiles))
        device = batch.input_ids.device
        batch.attn_metadata = BatchInvariantMetadata(
            rows.to(device), (positions >= 0).to(device), positions.clamp(min=0).to(device), slots.to(device)
        )

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer_id: int, batch: Batch) -> torch.Tensor:
        meta: BatchInvariantMetadata = batch.attn_metadata
        self.pool.store(layer_id, batch.out_slots, k, v)
        num_heads, kv_heads, head_dim = q.shape[1], k.shape[1], q.shape[2]
        group = num_heads // kv_heads  # query heads that share one KV head
        out = torch.zeros_like(q)
        for rows, valid, positions, slots in zip(meta.rows, meta.valid, meta.positions, meta.kv_slots):
            # [TILE_GROUP, Q_TILE, heads, d] -> [TILE_GROUP, kv_heads, group * Q_TILE, d]: GQA folded into rows
            queries = q[rows].view(TILE_GROUP, Q_TILE, kv_heads, group, head_dim).permute(0, 2, 3, 1, 4)
            queries = queries.reshape(TILE_GROUP, kv_heads, group * Q_TILE, head_dim).float() * head_dim**-0.5
            query_pos = positions.repeat(1, group).view(TILE_GROUP, 1, group * Q_TILE, 1)
            attended = self._attend(queries, query_pos, slots, layer_id)  # [TILE_GROUP, kv_heads, group * Q_TILE, d]
            attended = attended.view(TILE_GROUP, kv_heads, group, Q_TILE, head_dim).permute(0, 3, 1, 2, 4)
            out[rows[valid]] = attended.reshape(TILE_GROUP, Q_TILE, num_heads, head_dim)[valid].to(q.dtype)
        return out

    def _attend(
        self, queries: torch.Tensor, query_pos: torch.Tensor, slots: torch.Tensor, layer_id: int
    ) -> torch.Tensor:
        """Online softmax over the key blocks, in position order; fixed shapes throughout.
        queries [TILE_GROUP, kv_heads, rows, d] fp32 (scaled), query_pos [TILE_GROUP, 1, rows, 1],
        slots [TILE_GROUP, num_keys] -> [TILE_GROUP, kv_heads, rows, d]."""
        tiles, kv_heads, rows, head_dim = queries.shape
        running_max = torch.full((tiles, kv_heads, rows, 1), -math.inf, device=queries.device)
        running_sum = torch.zeros_like(running_max)
        acc = torch.zeros_like(queries)
        for first in range(0, slots.shape[1], KV_BLOCK):
            block = slots[:, first : first + KV_BLOCK].flatten()
            keys = self.pool.k_buffer[layer_id].index_select(0, block).view(tiles, KV_BLOCK, kv_heads, head_dim)
            values = self.pool.v_buffer[layer_id].index_select(0, block).view(tiles, KV_BLOCK, kv_heads, head_dim)
            scores = queries @ keys.permute(0, 2, 3, 1).float()  # [tiles, kv_heads, rows, KV_BLOCK]
            key_pos = torch.arange(first, first + KV_BLOCK, device=queries.device)
            scores = scores.masked_fill(key_pos > query_pos, -math.inf)  # causal; also hides other requests' slots
            new_max = torch.maximum(running_max, scores.amax(-1, keepdim=True))
            correction = torch.exp(running_max - new_max)  # 1 for a fully masked block, 0 before the first
            weights = torch.exp(scores - new_max)
            running_sum = running_sum * correction + weights.sum(-1, keepdim=True)
            acc = acc * correction + weights @ values.transpose(1, 2).float()
            running_max = new_max
        return acc / running_sum
