"""The capstone's seam (minisgl/models/tp_ops.py): an engine given `tp_ops` runs every TP layer's
forward and its weight loading through them."""

from __future__ import annotations

from collections import Counter

import torch
import torch.nn.functional as F

from minisgl import LLM, SamplingParams
from minisgl.distributed import all_gather, all_reduce, get_tp_info
from minisgl.models import weight


class CountingOps:
    """Plain implementations of the five steps that count their calls."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()

    def column_linear(self, x, w, b):
        self.calls["column_linear"] += 1
        return F.linear(x, w, b)

    def row_linear(self, x, w, b):
        self.calls["row_linear"] += 1
        out = all_reduce(F.linear(x, w))
        return out if b is None else out + b

    def vocab_embedding(self, ids, w, vocab_size):
        self.calls["vocab_embedding"] += 1
        start = get_tp_info().rank * w.shape[0]
        mine = (ids >= start) & (ids < start + w.shape[0])
        return all_reduce(F.embedding(torch.where(mine, ids - start, 0), w) * mine.unsqueeze(-1))

    def lm_head(self, h, w, vocab_size):
        self.calls["lm_head"] += 1
        n = h.shape[0]
        blocks = all_gather(F.linear(h, w)).view(get_tp_info().size, n, -1)  # [tp, n, shard]
        return blocks.transpose(0, 1).reshape(n, -1)[:, :vocab_size]

    def shard_and_merge(self, tensors, rank, tp_size, config):
        self.calls["shard_and_merge"] += 1
        return weight.shard_and_merge(tensors, rank, tp_size, config)


def test_an_engine_with_tp_ops_runs_them(tiny_model_dir) -> None:
    model_dir, prompts = tiny_model_dir("qwen3"), [[5, 6, 7, 8], [40, 41]]
    params = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
    with LLM(model_dir, dtype="float32", num_pages=256, progress=False) as llm:
        ours = [out.token_ids for out in llm.generate(prompts, params)]
    ops = CountingOps()
    with LLM(model_dir, dtype="float32", num_pages=256, progress=False, tp_ops=ops) as llm:
        theirs = [out.token_ids for out in llm.generate(prompts, params)]
    assert theirs == ours
    assert set(ops.calls) == {"column_linear", "row_linear", "vocab_embedding", "lm_head", "shard_and_merge"}
