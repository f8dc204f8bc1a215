"""Hidden cases of chapters 01, 04, 05 and 07, with sizes drawn at random on every run (the seed
is printed in any failure, so a failing run can be reproduced)."""

from __future__ import annotations

import random
import time

import pytest
import torch
import torch.nn.functional as F

from exercises.grader import adapters
from exercises.grader.checks import SEAM_ALL_GATHER, SEAM_ALL_REDUCE, assert_collectives, assert_ranks_close, tolerance
from exercises.grader.outcomes import WrongAnswer

SEED = int(time.time())


def _rng(salt: int) -> random.Random:
    return random.Random(SEED * 100 + salt)


@pytest.mark.task("01-tp-first-principles/row-forward")
@pytest.mark.timeout(180)
def test_row_forward_fresh_shapes(run_ranks, world_size):
    rng = _rng(1)
    tokens, in_features, out_features = rng.randint(1, 9), world_size * rng.randint(1, 16), rng.randint(1, 40)
    generator = torch.Generator().manual_seed(SEED)
    x = torch.randn(tokens, in_features, generator=generator)
    weight = torch.randn(out_features, in_features, generator=generator)
    bias = torch.randn(out_features, generator=generator)
    results = run_ranks([adapters.row_parallel_forward(x.chunk(world_size, dim=-1)[rank].clone(),
                                                       weight.chunk(world_size, dim=1)[rank].clone(), bias,
                                                       tp=(rank, world_size)) for rank in range(world_size)])
    expected = F.linear(x.double(), weight.double(), bias.double())
    assert_ranks_close(f"row_parallel_forward, [{tokens}, {in_features}] x [{out_features}, {in_features}] "
                       f"(seed {SEED})", [r.value for r in results], expected, torch.float32,
                       tolerance(torch.float32, in_features, roundings=2 * world_size + 1))
    assert_collectives("row_parallel_forward", results, {SEAM_ALL_REDUCE: 1})


def _vocab_shard(table: torch.Tensor, vocab: int, rank: int, world_size: int) -> torch.Tensor:
    shard_size = -(-vocab // world_size)
    padded = torch.zeros(shard_size * world_size, table.shape[1])
    padded[:vocab] = table
    return padded[rank * shard_size:(rank + 1) * shard_size].clone()


@pytest.mark.task("05-vocab-parallelism/lm-head")
@pytest.mark.timeout(180)
def test_lm_head_fresh_vocabulary(run_ranks, world_size):
    rng = _rng(2)
    vocab, hidden_size, positions = rng.randint(world_size, 60), rng.randint(1, 12), rng.randint(1, 5)
    generator = torch.Generator().manual_seed(SEED + 2)
    table = torch.randn(vocab, hidden_size, generator=generator)
    hidden = torch.randn(positions, hidden_size, generator=generator)
    results = run_ranks([adapters.parallel_lm_head(hidden, _vocab_shard(table, vocab, rank, world_size), vocab,
                                                   tp=(rank, world_size)) for rank in range(world_size)])
    assert_ranks_close(f"parallel_lm_head, V={vocab}, hidden {hidden_size}, {positions} positions (seed {SEED})",
                       [r.value for r in results], F.linear(hidden.double(), table.double()), torch.float32,
                       tolerance(torch.float32, hidden_size, roundings=1))
    assert_collectives("parallel_lm_head", results, {SEAM_ALL_GATHER: 1},
                       {SEAM_ALL_GATHER: ((positions, -(-vocab // world_size)), "this rank's [n, shard_size] logits")})


@pytest.mark.task("04-weight-sharding/qkv-gqa")
def test_shard_qkv_fresh_heads(impl):
    rng = _rng(3)
    kv = rng.choice([1, 2, 4])
    heads, tp = kv * rng.choice([1, 2, 3]), rng.choice([1, 2, 4, 8])
    head_dim, hidden = rng.randint(1, 5), rng.randint(1, 7)
    if heads % tp or (kv % tp and tp % kv):
        tp = 1
    q, k, v = (torch.randn(n * head_dim, hidden) for n in (heads, kv, kv))
    for rank in range(tp):
        local = heads // tp
        first = rank * kv // tp if kv < tp else rank * (kv // tp)
        count = max(1, kv // tp)
        kv_rows = slice(first * head_dim, (first + count) * head_dim)
        expected = torch.cat([q[rank * local * head_dim:(rank + 1) * local * head_dim], k[kv_rows], v[kv_rows]])
        got = adapters.shard_qkv(impl, q, k, v, rank, tp, heads, kv, head_dim).value
        if not isinstance(got, torch.Tensor) or got.shape != expected.shape or not torch.equal(got, expected):
            raise WrongAnswer(f"shard_qkv: {heads} heads, {kv} KV heads, head_dim {head_dim}, tp={tp}, rank {rank} "
                              f"(seed {SEED}): wrong rows")


@pytest.mark.task("07-tp-decoder-layer/local-shapes")
def test_local_shapes_fresh_config(impl):
    rng = _rng(4)
    kv = rng.choice([1, 2, 4, 8])
    heads = kv * rng.choice([1, 2, 4])
    tp = rng.choice([t for t in (1, 2, 4, 8) if heads % t == 0])
    config = {"hidden_size": 64 * heads, "intermediate_size": 128 * tp * rng.randint(1, 8),
              "num_hidden_layers": rng.randint(1, 40), "num_attention_heads": heads, "num_key_value_heads": kv,
              "head_dim": rng.choice([32, 64, 80, 128]), "vocab_size": rng.randint(1000, 200_000)}
    q_local, kv_local = heads // tp, max(1, kv // tp)
    expected = {
        "local_q_heads": q_local, "local_kv_heads": kv_local, "qkv_out": (q_local + 2 * kv_local) * config["head_dim"],
        "o_proj_in": q_local * config["head_dim"], "gate_up_out": 2 * config["intermediate_size"] // tp,
        "down_in": config["intermediate_size"] // tp, "vocab_shard": -(-config["vocab_size"] // tp),
        "kv_bytes_per_token": 2 * config["num_hidden_layers"] * kv_local * config["head_dim"] * 2,
    }
    got = adapters.local_shapes(impl, dict(config), tp, 2)
    wrong = {k: (got.get(k) if isinstance(got, dict) else None, v) for k, v in expected.items()
             if not isinstance(got, dict) or got.get(k) != v}
    if wrong:
        raise WrongAnswer(f"local_shapes({config}, tp={tp}) (seed {SEED}): (got, expected) {wrong}")
