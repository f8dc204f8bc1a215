"""Attention in plain torch, on any device: gather each request's cached K/V into a padded batch,
mask, and call `scaled_dot_product_attention` once per layer.

Prefill with a cached prefix and batched decode are the same computation: request i has p_i cached
tokens and e_i new ones; new token j (0-based) may see cached positions < p_i + j + 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from minisgl.core import Batch
from minisgl.kvcache import KVCachePool


@dataclass
class TorchAttentionMetadata:
    kv_slots: torch.Tensor  # [reqs, max_kv] pool slot of every visible token (padding -> slot 0)
    q_index: torch.Tensor  # [reqs, max_q] row of each padded query in the flat token array
    q_valid: torch.Tensor  # [reqs, max_q] which padded queries are real tokens
    mask: torch.Tensor  # [reqs, 1, max_q, max_kv] True where attention is allowed


class TorchAttentionBackend:
    def __init__(self, pool: KVCachePool) -> None:
        self.pool = pool

    def prepare(self, batch: Batch) -> None:
        device = batch.input_ids.device
        kv_lens = [p + e for p, e in zip(batch.prefix_lens, batch.extend_lens)]
        max_q, max_kv = max(batch.extend_lens), max(kv_lens)
        kv_slots = torch.zeros(batch.size, max_kv, dtype=torch.int64)
        q_index = torch.zeros(batch.size, max_q, dtype=torch.int64)
        start = 0
        for i, (req, extend, kv_len) in enumerate(zip(batch.reqs, batch.extend_lens, kv_lens)):
            kv_slots[i, :kv_len] = self.pool.slot_tensor(req.pages, kv_len)
            q_index[i, :extend] = torch.arange(start, start + extend)
            start += extend
        extend = torch.tensor(batch.extend_lens)
        prefix = torch.tensor(batch.prefix_lens)
        q_pos = torch.arange(max_q)  # query j of request i sits at position prefix_i + j
        q_valid = q_pos[None, :] < extend[:, None]  # [reqs, max_q]
        kv_pos = torch.arange(max_kv)
        visible = kv_pos[None, None, :] <= (prefix[:, None, None] + q_pos[None, :, None])  # causal
        visible &= kv_pos[None, None, :] < (prefix + extend)[:, None, None]  # inside this request
        visible[:, :, 0] |= ~q_valid  # padded queries see one slot, so no row is all -inf (NaN)
        batch.attn_metadata = TorchAttentionMetadata(
            kv_slots.to(device), q_index.to(device), q_valid.to(device), visible.unsqueeze(1).to(device)
        )

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer_id: int, batch: Batch) -> torch.Tensor:
        meta: TorchAttentionMetadata = batch.attn_metadata
        self.pool.store(layer_id, batch.out_slots, k, v)
        keys = self.pool.k_buffer[layer_id][meta.kv_slots]  # [reqs, max_kv, kv_heads, d]
        values = self.pool.v_buffer[layer_id][meta.kv_slots]
        queries = q[meta.q_index]  # [reqs, max_q, q_heads, d]
        out = F.scaled_dot_product_attention(
            queries.transpose(1, 2),  # [reqs, q_heads, max_q, d]
            keys.transpose(1, 2),  # [reqs, kv_heads, max_kv, d]
            values.transpose(1, 2),
            attn_mask=meta.mask,
            enable_gqa=True,  # each group of q_heads / kv_heads query heads shares one KV head
        )
        return out.transpose(1, 2)[meta.q_valid]  # [tokens, q_heads, d], back in flat token order
