"""Attention in plain torch, on any device: gather each request's cached K/V into a padded batch,
mask, and call `scaled_dot_product_attention` once per layer (chapter 07). It is also the reference
the Triton and FlashInfer kernels are tested against (chapter 10).

Prefill with a cached prefix and batched decode are the same computation: request i has p_i cached
tokens and e_i new ones; new token j (0-based) may see cached positions < p_i + j + 1. A decode
step in fp32 on the CPU (one query per request) skips the padding and the mask: one C function
(minisgl/cpu/fused.c) reads each request's own cache rows. That step is all C calls, so it
can run in a CPU graph (minisgl/cpu/graphs.py): the graph hooks below keep its slot table and
lengths in static buffers.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from minisgl.core import Batch
from minisgl.cpu.kernels import cpu_kernels, use_cpu_kernels
from minisgl.kvcache import KVCachePool

from .base import AttentionBackend


@dataclass
class TorchAttentionMetadata:
    kv_slots: torch.Tensor  # [reqs, max_kv] pool slot of every visible token (padding -> slot 0)
    q_index: torch.Tensor  # [reqs, max_q] row of each padded query in the flat token array
    q_valid: torch.Tensor  # [reqs, max_q] which padded queries are real tokens
    mask: torch.Tensor | None  # [reqs, 1, max_q, max_kv] True where attention is allowed (None in a
    # CPU graph, whose decode attention is the C function, which needs no mask)
    kv_lens: torch.Tensor  # [reqs] int64: visible tokens of each request


class TorchAttentionBackend(AttentionBackend):
    supports_cpu_graph = True

    def __init__(self, pool: KVCachePool, max_seq_len: int) -> None:
        self.pool = pool
        self.max_seq_len = max_seq_len  # the width of a CPU graph's slot table
        self._graph_slots: torch.Tensor | None = None  # [max_bs, max_seq_len] int64, CPU graphs only
        self._graph_lens: torch.Tensor | None = None  # [max_bs] int64
        self._graph_rows: list[tuple[int, int]] = []  # per slot-table row: (request uid, slots written)

    def prepare(self, batch: Batch) -> None:
        # A batch outside the graphs (a prefill, a retracted request coming back) may give a request
        # new pages: the graphs' slot table is rewritten from the pages on their next replay.
        self._graph_rows = [(-1, 0)] * len(self._graph_rows)
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
            kv_slots.to(device), q_index.to(device), q_valid.to(device), visible.unsqueeze(1).to(device),
            torch.tensor(kv_lens, device=device),
        )

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer_id: int, batch: Batch) -> torch.Tensor:
        meta: TorchAttentionMetadata = batch.attn_metadata
        if meta.q_index.shape[1] == 1 and use_cpu_kernels(q):  # a decode step in fp32 on the CPU: one C call
            return cpu_kernels().decode_attention(q, k, v, batch.out_slots, self.pool.k_buffer[layer_id],
                                                  self.pool.v_buffer[layer_id], meta.kv_slots, meta.kv_lens,
                                                  q.shape[2] ** -0.5)  # stores k, v too
        self.pool.store(layer_id, batch.out_slots, k, v)
        reqs, max_kv = meta.kv_slots.shape
        max_q = meta.q_index.shape[1]
        num_heads, kv_heads, head_dim = q.shape[1], k.shape[1], q.shape[2]
        group = num_heads // kv_heads  # query heads that share one KV head
        # index_select on the flattened table is a plain row gather, much faster on CPU than
        # advanced indexing with a 2-D index
        flat_slots = meta.kv_slots.flatten()
        # in q's dtype: a bf16 cache under fp32 activations is widened back (exactly) as it is read
        keys = self.pool.k_buffer[layer_id].index_select(0, flat_slots).to(q.dtype).view(reqs, max_kv, kv_heads,
                                                                                          head_dim)
        values = self.pool.v_buffer[layer_id].index_select(0, flat_slots).to(q.dtype).view(reqs, max_kv, kv_heads,
                                                                                            head_dim)
        # Query head h uses KV head h // group, so fold each group into the query length:
        # [reqs, max_q, kv_heads * group, d] -> [reqs, kv_heads, group * max_q, d]. Attention is
        # then plain multi-head over kv_heads (cheaper than SDPA's enable_gqa path).
        queries = q[meta.q_index].view(reqs, max_q, kv_heads, group, head_dim)
        queries = queries.permute(0, 2, 3, 1, 4).reshape(reqs, kv_heads, group * max_q, head_dim)
        mask = meta.mask.expand(reqs, group, max_q, max_kv).reshape(reqs, 1, group * max_q, max_kv)
        out = F.scaled_dot_product_attention(
            queries, keys.transpose(1, 2), values.transpose(1, 2), attn_mask=mask
        )  # [reqs, kv_heads, group * max_q, d]
        out = out.view(reqs, kv_heads, group, max_q, head_dim).permute(0, 3, 1, 2, 4)
        out = out.reshape(reqs, max_q, num_heads, head_dim)
        return out[meta.q_valid]  # [tokens, q_heads, d], back in flat token order

    # ---- CPU graphs (minisgl/cpu/graphs.py): decode steps whose attention is the C function ----------
    def init_graph_buffers(self, max_bs: int) -> None:
        self._graph_slots = torch.zeros(max_bs, self.max_seq_len, dtype=torch.int64)
        self._graph_lens = torch.zeros(max_bs, dtype=torch.int64)
        self._graph_rows = [(-1, 0)] * max_bs

    def graph_metadata(self, bs: int) -> TorchAttentionMetadata:
        one_query = torch.zeros(bs, 1, dtype=torch.int64)  # what `forward` reads to take the decode path
        return TorchAttentionMetadata(self._graph_slots[:bs], one_query, one_query == 0, None, self._graph_lens[:bs])

    def prepare_graph_replay(self, batch: Batch, bucket: int) -> None:
        # Row i: the slots of request i's tokens so far, the new one included (lengths say how many
        # of the row's slots are real; the C function reads no further). A request in the same row
        # as last step has all but the new slot there already: one store, not its whole history.
        for i, (req, prefix, new_slot) in enumerate(zip(batch.reqs, batch.prefix_lens, batch.out_slots.tolist())):
            if self._graph_rows[i] != (req.uid, prefix):
                self._graph_slots[i, :prefix] = self.pool.slot_tensor(req.pages, prefix)
            self._graph_slots[i, prefix] = new_slot
            self._graph_rows[i] = (req.uid, prefix + 1)
        self._graph_lens[: batch.size] = torch.tensor(batch.prefix_lens) + 1
