"""TP layers on real gloo ranks against plain single-process references (chunk-the-reference tests)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from minisgl.layers import (
    ColumnParallelLinear,
    ParallelLMHead,
    QKVParallelLinear,
    RowParallelLinear,
    VocabParallelEmbedding,
)
from minisgl.models.config import ModelConfig
from minisgl.models.weight import shard_tensor
from minisgl.testing.multiprocess import run_ranks
from minisgl.testing.tolerance import matmul_tolerance

torch.manual_seed(0)
X = torch.randn(5, 24)
W = torch.randn(36, 24)
BIAS = torch.randn(36)


def _column(rank: int, size: int) -> torch.Tensor:
    layer = ColumnParallelLinear(24, 36, has_bias=True)
    layer.weight, layer.bias = W.chunk(size, 0)[rank], BIAS.chunk(size, 0)[rank]
    return layer.forward(X)  # [5, 36 / size], no communication


def _row(rank: int, size: int) -> torch.Tensor:
    layer = RowParallelLinear(36, 24, has_bias=True)
    w_t = W.t().contiguous()  # [24, 36]: in = 36 is split
    layer.weight, layer.bias = w_t.chunk(size, 1)[rank], BIAS[:24]
    x = torch.randn(5, 36, generator=torch.Generator().manual_seed(1))
    return layer.forward(x.chunk(size, 1)[rank])


@pytest.mark.timeout(120)
@pytest.mark.parametrize("tp", [2, 3, 4])
def test_column_parallel_concatenates_to_full_output(tp: int) -> None:
    parts = run_ranks(_column, tp)
    # each rank computes whole dot products, but a narrower matmul may be blocked (and rounded)
    # differently by the CPU's BLAS (AVX-512 kernels do): equal up to the rounding of 24-term sums
    torch.testing.assert_close(torch.cat(parts, dim=-1), F.linear(X, W, BIAS), **matmul_tolerance(X, W, BIAS))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("tp", [2, 3, 4])
def test_row_parallel_all_reduce_gives_full_output_on_every_rank(tp: int) -> None:
    x = torch.randn(5, 36, generator=torch.Generator().manual_seed(1))
    expected = F.linear(x, W.t(), BIAS[:24])
    for output in run_ranks(_row, tp):
        # partial sums are added in another order than one matmul: rounding differs slightly
        torch.testing.assert_close(output, expected, **matmul_tolerance(x, W.t(), BIAS[:24]))


VOCAB, HIDDEN = 1001, 8
TABLE = torch.randn(VOCAB, HIDDEN)
IDS = torch.tensor([0, 1, 250, 499, 500, 501, 750, 999, 1000])
VOCAB_CONFIG = ModelConfig.from_dict(
    {"architectures": ["LlamaForCausalLM"], "hidden_size": HIDDEN, "num_hidden_layers": 1, "num_attention_heads": 8,
     "num_key_value_heads": 2, "intermediate_size": 16, "vocab_size": VOCAB}
)


def _vocab(rank: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    embed = VocabParallelEmbedding(VOCAB, HIDDEN)
    embed.weight = shard_tensor("model.embed_tokens.weight", TABLE, rank, size, VOCAB_CONFIG)
    head = ParallelLMHead(VOCAB, HIDDEN, tied_embedding=embed)
    return embed.forward(IDS), head.forward(TABLE[:3])


@pytest.mark.timeout(120)
@pytest.mark.parametrize("tp", [2, 3, 4])
def test_vocab_parallel_embedding_and_lm_head_with_padding(tp: int) -> None:
    assert VOCAB % tp != 0  # the last shard is padded
    for embeddings, logits in run_ranks(_vocab, tp):
        torch.testing.assert_close(embeddings, TABLE[IDS], rtol=0, atol=0)  # one nonzero term per sum
        assert logits.shape == (3, VOCAB)  # padding trimmed
        torch.testing.assert_close(logits, TABLE[:3] @ TABLE.t(), **matmul_tolerance(TABLE[:3], TABLE))


QKV_CONFIG = ModelConfig.from_dict(
    {"architectures": ["LlamaForCausalLM"], "hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 8,
     "num_key_value_heads": 2, "head_dim": 4, "intermediate_size": 16, "vocab_size": 10}
)
WQ, WK, WV = torch.randn(32, 16), torch.randn(8, 16), torch.randn(8, 16)


def _qkv(rank: int, size: int) -> tuple[int, int, torch.Tensor]:
    layer = QKVParallelLinear(16, 4, 8, 2)
    shards = [shard_tensor(f"l.self_attn.{n}_proj.weight", w, rank, size, QKV_CONFIG)
              for n, w in zip("qkv", (WQ, WK, WV))]
    layer.weight = torch.cat(shards, dim=0)
    return layer.local_q_heads, layer.local_kv_heads, layer.forward(X[:, :16])


@pytest.mark.timeout(120)
@pytest.mark.parametrize("tp", [2, 4, 8])
def test_qkv_replicates_kv_heads_to_the_ranks_whose_queries_use_them(tp: int) -> None:
    x = X[:, :16]
    q_ref = (x @ WQ.t()).view(5, 8, 4)
    k_ref = (x @ WK.t()).view(5, 2, 4)
    v_ref = (x @ WV.t()).view(5, 2, 4)
    for rank, (local_q, local_kv, out) in enumerate(run_ranks(_qkv, tp)):
        assert (local_q, local_kv) == (8 // tp, max(1, 2 // tp))
        q, k, v = out.split([local_q * 4, local_kv * 4, local_kv * 4], dim=-1)
        torch.testing.assert_close(q.view(5, local_q, 4), q_ref[:, rank * local_q : (rank + 1) * local_q],
                                   **matmul_tolerance(x, WQ))
        # global query head h uses KV head h // (8 / 2); this rank's first query head decides where
        # its KV heads start, and both k and v hold those same heads (a v shard of another head fails)
        kv_heads = slice(rank * local_q // 4, rank * local_q // 4 + local_kv)
        torch.testing.assert_close(k.view(5, local_kv, 4), k_ref[:, kv_heads], **matmul_tolerance(x, WK))
        torch.testing.assert_close(v.view(5, local_kv, 4), v_ref[:, kv_heads], **matmul_tolerance(x, WV))


def test_tp_size_errors_name_the_valid_sizes() -> None:
    expected = "tp_size=3 does not divide num_attention_heads=8; valid tp sizes: 1, 2, 4, 8"
    with pytest.raises(ValueError, match=expected):
        QKV_CONFIG.check_tp_size(3)


def _strided_collectives(rank: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    from minisgl.distributed import all_gather, all_reduce

    base = torch.arange(12.0).reshape(3, 4) + rank
    return all_reduce(base[:, 1:3]), all_gather(base.t()[1:3])  # strided views: NCCL would refuse them


@pytest.mark.timeout(120)
def test_the_seam_takes_strided_tensors_on_every_backend() -> None:
    base = torch.arange(12.0).reshape(3, 4)
    for reduced, gathered in run_ranks(_strided_collectives, 2):
        torch.testing.assert_close(reduced, 2 * base[:, 1:3] + 1, rtol=0, atol=0)
        torch.testing.assert_close(gathered, torch.cat([base.t()[1:3], base.t()[1:3] + 1]), rtol=0, atol=0)


def test_a_collective_without_a_process_group_says_so() -> None:
    from minisgl.distributed import all_reduce, set_tp_info

    set_tp_info(1, 2)
    try:
        with pytest.raises(RuntimeError, match="needs a process group"):
            all_reduce(torch.ones(2))
    finally:
        set_tp_info(0, 1)
