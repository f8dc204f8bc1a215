"""Grades chapter 04 in one process (sharding is a pure function of rank and tp): the KV-head map,
the fused QKV shard, every shard rule, and the streaming shard-then-merge loader, at tp 1, 2 and 4,
in fp32 and bf16, with head_dim != hidden / heads, a vocabulary no tp > 1 divides, and more ranks
than KV heads.

Every full tensor holds 1, 2, 3, ... so each value names the element it came from, and a wrong
shard can be described ("rank 1 got rows 0..7 of q_proj.weight").
"""

from __future__ import annotations

import random

import pytest
import torch

from exercises.grader import adapters
from exercises.grader.checks import assert_value_error, changed
from exercises.grader.outcomes import WrongAnswer

HEADS, KV_HEADS, HEAD_DIM, HIDDEN, INTERMEDIATE, VOCAB = 8, 2, 2, 6, 12, 11  # head_dim != 6 / 8
TP_SIZES = [1, 2, 4]  # 4 > KV_HEADS: neighbouring ranks share a KV head


def _config(tied: bool = False) -> dict:
    """The model's config.json; the learner's function gets it as a minisgl ModelConfig."""
    return {
        "architectures": ["Qwen2ForCausalLM"], "hidden_size": HIDDEN, "num_hidden_layers": 1,
        "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM,
        "intermediate_size": INTERMEDIATE, "vocab_size": VOCAB, "tie_word_embeddings": tied,
    }


def _numbered(*shape: int, offset: int = 0, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return (torch.arange(1, 1 + torch.Size(shape).numel(), dtype=torch.float32).reshape(shape) + offset).to(dtype)


def _where(full: torch.Tensor, got: torch.Tensor) -> str:
    """Where `got` was cut from in `full`, read off its first and last values."""
    if got.numel() == 0:
        return f"shape {tuple(got.shape)}"
    hits = [(full == got.flatten()[i]).nonzero() for i in (0, -1)]
    if any(len(h) == 0 for h in hits):
        return f"shape {tuple(got.shape)}, values not from this tensor"
    return f"shape {tuple(got.shape)}, from {tuple(hits[0][0].tolist())} to {tuple(hits[1][0].tolist())}"


def _expected_kv(rank: int, tp: int, heads: int, kv_heads: int) -> tuple[int, int]:
    """From first principles: the KV heads this rank's query heads attend with."""
    local = heads // tp
    used = sorted({q // (heads // kv_heads) for q in range(rank * local, (rank + 1) * local)})
    return used[0], len(used)


# ---- KV heads and QKV ---------------------------------------------------------------------------
KV_CASES = [(8, 2, 1), (8, 2, 2), (8, 2, 4), (8, 1, 4), (8, 4, 2), (8, 8, 4), (6, 3, 3), (8, 2, 8)]  # heads, kv, tp


@pytest.mark.task("04-weight-sharding/qkv-gqa", weight=3)
def test_kv_heads_of_rank(impl):
    for heads, kv, tp in KV_CASES:
        for rank in range(tp):
            got = adapters.kv_heads_of_rank(impl, rank, tp, kv)
            expected = _expected_kv(rank, tp, heads, kv)
            if not isinstance(got, tuple) or got != expected:
                raise WrongAnswer(f"{kv} KV heads at tp={tp}: rank {rank} got (first, count) {got!r}, expected "
                                  f"{expected} (its query heads {rank * heads // tp}..{(rank + 1) * heads // tp - 1} "
                                  f"attend with KV head {expected[0]})")
    for kv, tp in [(3, 2), (2, 3)]:
        assert_value_error(f"kv_heads_of_rank(0, tp_size={tp}, num_kv_heads={kv})",
                           lambda: adapters.kv_heads_of_rank(impl, 0, tp, kv))
    assert_value_error("kv_heads_of_rank(rank=4, tp_size=4, ...)", lambda: adapters.kv_heads_of_rank(impl, 4, 4, 2))


@pytest.mark.task("04-weight-sharding/qkv-gqa")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("heads,kv,tp", KV_CASES, ids=[f"h{h}-kv{k}-tp{t}" for h, k, t in KV_CASES])
def test_shard_qkv(impl, heads, kv, tp, dtype):
    d = HEAD_DIM
    q = _numbered(heads * d, HIDDEN, dtype=dtype)
    k, v = _numbered(kv * d, HIDDEN, offset=1000, dtype=dtype), _numbered(kv * d, HIDDEN, offset=2000, dtype=dtype)
    for rank in range(tp):
        first, count = _expected_kv(rank, tp, heads, kv)
        local = heads // tp
        expected = torch.cat([q[rank * local * d:(rank + 1) * local * d], k[first * d:(first + count) * d],
                              v[first * d:(first + count) * d]])
        result = adapters.shard_qkv(impl, q, k, v, rank, tp, heads, kv, d)
        got = result.value
        if result.changed:
            raise WrongAnswer(f"shard_qkv modified its inputs {changed(result, 'qkv')}; the caller still needs them")
        if not isinstance(got, torch.Tensor) or got.shape != expected.shape or not torch.equal(got, expected):
            shape = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
            held = sorted({int(x) // 1000 * 1000 + (int(x) % 1000 - 1) // (HIDDEN * d)
                           for x in got[:, 0].float().tolist()}) if isinstance(got, torch.Tensor) and got.numel() else []
            raise WrongAnswer(f"{heads} heads / {kv} KV heads at tp={tp}, rank {rank}: got shape {shape}, expected "
                              f"{tuple(expected.shape)} = q heads {rank * local}..{(rank + 1) * local - 1}, then k and v of "
                              f"KV head(s) {first}..{first + count - 1}; rows held (1000 = k, 2000 = v, + head): {held}")
        if got.dtype != dtype:
            raise WrongAnswer(f"shard_qkv returned {got.dtype} for {dtype} weights")


@pytest.mark.task("04-weight-sharding/qkv-gqa")
@pytest.mark.error_case
def test_shard_qkv_rejects_what_does_not_split(impl):
    q, k, v = (_numbered(heads * HEAD_DIM, HIDDEN) for heads in (HEADS, KV_HEADS, KV_HEADS))
    k1, v1 = k[:HEAD_DIM], v[:HEAD_DIM]  # one KV head: 3 ranks may share it, but 8 query heads do not split 3 ways
    assert_value_error("shard_qkv with 8 heads (1 KV head) at tp=3",
                       lambda: adapters.shard_qkv(impl, q, k1, v1, 0, 3, HEADS, 1, HEAD_DIM))
    assert_value_error("shard_qkv with a q of 14 rows for 8 heads of 2",
                       lambda: adapters.shard_qkv(impl, q[:14], k, v, 0, 2, HEADS, KV_HEADS, HEAD_DIM))


# ---- shard rules --------------------------------------------------------------------------------
def _checkpoint(dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    """A one-layer Qwen2-like checkpoint (q/k/v biases, plus an o_proj bias and a q_norm) by name."""
    layer = "model.layers.0."
    shapes = {
        "model.embed_tokens.weight": (VOCAB, HIDDEN),
        layer + "input_layernorm.weight": (HIDDEN,),
        layer + "self_attn.q_proj.weight": (HEADS * HEAD_DIM, HIDDEN), layer + "self_attn.q_proj.bias": (HEADS * HEAD_DIM,),
        layer + "self_attn.k_proj.weight": (KV_HEADS * HEAD_DIM, HIDDEN), layer + "self_attn.k_proj.bias": (KV_HEADS * HEAD_DIM,),
        layer + "self_attn.v_proj.weight": (KV_HEADS * HEAD_DIM, HIDDEN), layer + "self_attn.v_proj.bias": (KV_HEADS * HEAD_DIM,),
        layer + "self_attn.o_proj.weight": (HIDDEN, HEADS * HEAD_DIM), layer + "self_attn.o_proj.bias": (HIDDEN,),
        layer + "self_attn.q_norm.weight": (HEAD_DIM,),
        layer + "post_attention_layernorm.weight": (HIDDEN,),
        layer + "mlp.gate_proj.weight": (INTERMEDIATE, HIDDEN), layer + "mlp.up_proj.weight": (INTERMEDIATE, HIDDEN),
        layer + "mlp.down_proj.weight": (HIDDEN, INTERMEDIATE),
        "model.norm.weight": (HIDDEN,),
        "lm_head.weight": (VOCAB, HIDDEN),
        layer + "self_attn.rotary_emb.inv_freq": (HEAD_DIM // 2,),
    }
    return {name: _numbered(*shape, offset=100_000 * i, dtype=dtype)
            for i, (name, shape) in enumerate(sorted(shapes.items()))}


def _expected_shard(name: str, full: torch.Tensor, rank: int, tp: int) -> torch.Tensor:
    """The shard rules of the chapter, written out independently of the engine."""
    module, kind = name.split(".")[-2:]
    if module in ("k_proj", "v_proj"):
        first, count = _expected_kv(rank, tp, HEADS, KV_HEADS)
        return full[first * HEAD_DIM:(first + count) * HEAD_DIM]
    if module in ("q_proj", "gate_proj", "up_proj"):
        size = full.shape[0] // tp
        return full[rank * size:(rank + 1) * size]
    if module in ("o_proj", "down_proj") and kind == "weight":
        size = full.shape[1] // tp
        return full[:, rank * size:(rank + 1) * size]
    if module in ("embed_tokens", "lm_head"):
        size = -(-VOCAB // tp)
        shard = torch.zeros(size, full.shape[1], dtype=full.dtype)
        rows = full[rank * size:(rank + 1) * size]
        shard[:len(rows)] = rows
        return shard
    return full


@pytest.mark.task("04-weight-sharding/shard-rules", weight=4)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("tp", TP_SIZES, ids=[f"tp{tp}" for tp in TP_SIZES])
def test_shard_rules(impl, tp, dtype):
    config, problems = _config(), []
    for name, full in _checkpoint(dtype).items():
        if "rotary_emb" in name:
            continue
        for rank in range(tp):
            expected = _expected_shard(name, full, rank, tp)
            result = adapters.shard_tensor(impl, name, full, rank, tp, config)
            got = result.value
            if "tensor" in changed(result, ("name", "tensor")):
                problems.append(f"{name} rank {rank}: shard_tensor modified the full tensor")
            elif not isinstance(got, torch.Tensor) or got.shape != expected.shape or not torch.equal(got, expected):
                where = _where(full, got) if isinstance(got, torch.Tensor) else type(got).__name__
                problems.append(f"{name} rank {rank}: got {where}; expected {_where(full, expected)}")
            elif got.dtype != dtype:
                problems.append(f"{name} rank {rank}: dtype {got.dtype}, expected {dtype} (keep the checkpoint's)")
            elif result.aliased:
                problems.append(f"{name} rank {rank}: the result is a view of the full tensor, which then stays "
                                "alive as long as the shard does; return a copy (.clone())")
            else:
                continue
            break
    if problems:
        raise WrongAnswer(f"shard_tensor at tp={tp}, {len(problems)} tensors wrong:\n  " + "\n  ".join(problems))


@pytest.mark.task("04-weight-sharding/shard-rules")
@pytest.mark.error_case
def test_shard_rules_reject_uneven_splits(impl):
    config, layer = _config(), "model.layers.0."
    for name, shape, tp in ((layer + "mlp.gate_proj.weight", (INTERMEDIATE, HIDDEN), 5),
                            (layer + "self_attn.o_proj.weight", (HIDDEN, 18), 4),
                            (layer + "self_attn.k_proj.weight", (KV_HEADS * HEAD_DIM, HIDDEN), 3)):
        full = _numbered(*shape)
        assert_value_error(f"shard_tensor({name} of shape {shape}, tp={tp})",
                           lambda: adapters.shard_tensor(impl, name, full, 0, tp, config))


# ---- streaming shard, then merge ----------------------------------------------------------------
# The worker streams the checkpoint to the learner's loader one fresh tensor at a time, each watched
# by a weak reference (child/jobs.py: Stream), and reports the first full tensor kept alive too long.


def _expected_stream(checkpoint: dict[str, torch.Tensor], order: list[str], rank: int, tp: int, tied: bool):
    """(name, tensor, index of the input it must follow) for every output, in output order."""
    fused_of = {"q_proj": ("qkv_proj", 3), "k_proj": ("qkv_proj", 3), "v_proj": ("qkv_proj", 3),
                "gate_proj": ("gate_up_proj", 2), "up_proj": ("gate_up_proj", 2)}
    slots = {"q_proj": 0, "k_proj": 1, "v_proj": 2, "gate_proj": 0, "up_proj": 1}
    pending: dict[str, dict[int, torch.Tensor]] = {}
    out = []
    for index, name in enumerate(order):
        if "rotary_emb" in name or (tied and name.startswith("lm_head.")):
            continue
        shard = _expected_shard(name, checkpoint[name], rank, tp)
        module = name.split(".")[-2]
        if module not in fused_of:
            out.append((name, shard, index))
            continue
        fused, size = fused_of[module]
        fused_name = name.replace(f".{module}.", f".{fused}.")
        pending.setdefault(fused_name, {})[slots[module]] = shard
        if len(pending[fused_name]) == size:
            parts = pending.pop(fused_name)
            out.append((fused_name, torch.cat([parts[i] for i in range(size)]), index))
    return out


def _order(names: list[str], order: str) -> list[str]:
    if order == "shuffled":
        return random.Random(4).sample(names, len(names))
    return sorted(names, reverse=order == "reversed")


STREAM_CASES = [(tp, tied, order, torch.float32) for tp in TP_SIZES for tied in (False, True)
                for order in ("sorted", "reversed", "shuffled")] + [(2, False, "shuffled", torch.bfloat16)]


@pytest.mark.task("04-weight-sharding/shard-then-merge")
@pytest.mark.parametrize("tp,tied,order,dtype", STREAM_CASES, ids=[
    f"tp{tp}-{'tied' if tied else 'untied'}-{order}-{str(dtype)[6:]}" for tp, tied, order, dtype in STREAM_CASES])
def test_shard_and_merge(impl, tp, tied, order, dtype):
    checkpoint, config = _checkpoint(dtype), _config(tied)
    names = _order(list(checkpoint), order)
    for rank in range(tp):
        expected = _expected_stream(checkpoint, names, rank, tp, tied)
        where = f"tp={tp} rank {rank}, {order} checkpoint order{', tied' if tied else ''}, {dtype}"
        result = adapters.shard_and_merge(impl, [(name, checkpoint[name]) for name in names], rank, tp, config)
        got = result.value if isinstance(result.value, list) else []
        if not all(isinstance(item, tuple) and len(item) == 3 and isinstance(item[0], str) for item in got):
            raise WrongAnswer(f"{where}: shard_and_merge should yield (name, tensor) pairs, got {result.value!r:.200}")
        missing = sorted({n for n, _, _ in expected} - {n for n, _, _ in got})
        extra = sorted({n for n, _, _ in got} - {n for n, _, _ in expected})
        if missing or extra:
            raise WrongAnswer(f"{where}: missing {missing}, unexpected {extra}")
        wanted = {n: (t, i) for n, t, i in expected}
        for name, tensor, after in got:
            t, i = wanted[name]
            if not isinstance(tensor, torch.Tensor) or tensor.shape != t.shape or not torch.equal(tensor, t):
                raise WrongAnswer(f"{where}: {name} differs from the expected {tuple(t.shape)} tensor (shard each part "
                                  "first, then cat in q, k, v / gate, up order)")
            if tensor.dtype != dtype:
                raise WrongAnswer(f"{where}: {name} has dtype {tensor.dtype}, expected the checkpoint's {dtype}")
            if after != i:
                raise WrongAnswer(f"{where}: {name} was yielded after reading {after + 1} tensors; it was complete "
                                  f"after {i + 1} (stream: yield each tensor as soon as it is complete)")
        if result.extra.get("kept_alive") is not None:
            raise WrongAnswer(f"{where}: the full tensor {result.extra['kept_alive']} was still alive two tensors "
                              "later: keep "
                              "the shards, not the full tensors, and yield copies, never views of them")


@pytest.mark.task("04-weight-sharding/shard-then-merge")
@pytest.mark.error_case
def test_shard_and_merge_names_missing_parts(impl):
    checkpoint = sorted((n, t) for n, t in _checkpoint().items() if "v_proj" not in n)
    assert_value_error("shard_and_merge of a checkpoint without v_proj",
                       lambda: adapters.shard_and_merge(impl, checkpoint, 0, 2, _config()))
