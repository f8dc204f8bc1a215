"""Grades chapter 04 in one process (sharding is a pure function of rank and tp): the KV-head map,
the fused QKV shard, every shard rule, and the streaming shard-then-merge loader, at tp 1, 2 and 4,
in fp32 and bf16, with head_dim != hidden / heads, a vocabulary no tp > 1 divides, and more ranks
than KV heads. Each contract's small domain is enumerated, every point of a test sent in one job:
the vocabulary rule at every V = 1 .. 3 * tp for tp = 1 .. 4 (every padding pattern, shards that are
all padding included), in contiguous and non-contiguous memory; the rank bounds at -1, 0, tp - 1 and
tp; q, k and v with too few and too many rows; errors that must name the tensor; checkpoints of two
layers streamed in shuffled order.

Every full tensor holds 1, 2, 3, ... so each value names the element it came from, and a wrong
shard can be described ("rank 1 got rows 0..7 of q_proj.weight").
"""

from __future__ import annotations

import random

import pytest
import torch

from exercises.grader import adapters
from exercises.grader.checks import assert_ranks_raise_value_error, assert_returned, changed
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


def _kv_bad_cases() -> list[tuple[int, int, int, str]]:
    """(rank, tp, kv, why) the map must refuse: tp that does not fit the KV heads, and each rank bound
    (-1 below 0, tp past tp - 1) at every tp where the KV heads fit."""
    cases = [(0, tp, kv, "tp does not fit the KV heads") for kv, tp in [(3, 2), (2, 3), (4, 3), (3, 4)]]
    for kv, tp in [(2, 1), (2, 2), (1, 3), (2, 4), (8, 4)]:
        cases += [(-1, tp, kv, "rank -1 is below 0"), (tp, tp, kv, f"rank {tp} is past tp - 1 = {tp - 1}")]
    return cases + [(0, 0, 2, "no rank is in [0, 0)"), (0, -1, 2, "no rank is in [0, -1)")]


@pytest.mark.task("04-weight-sharding/qkv-gqa", weight=3)
def test_kv_heads_of_rank(impl):
    good = [(heads, kv, tp, rank) for heads, kv, tp in KV_CASES for rank in range(tp)]  # 0 and tp - 1 included
    bad = _kv_bad_cases()
    results = adapters.one_batched(impl, [adapters.kv_heads_call(rank, tp, kv) for _, kv, tp, rank in good]
                                   + [adapters.kv_heads_call(rank, tp, kv) for rank, tp, kv, _ in bad])
    for (heads, kv, tp, rank), result in zip(good, results):
        assert_returned(f"kv_heads_of_rank({rank}, tp_size={tp}, num_kv_heads={kv})", [result])
        got, expected = result.value, _expected_kv(rank, tp, heads, kv)
        if not isinstance(got, tuple) or got != expected:
            raise WrongAnswer(f"{kv} KV heads at tp={tp}: rank {rank} got (first, count) {got!r}, which is not the "
                              f"KV heads its query heads {rank * heads // tp}..{(rank + 1) * heads // tp - 1} attend "
                              "with")
    for (rank, tp, kv, why), result in zip(bad, results[len(good):]):
        assert_ranks_raise_value_error(f"kv_heads_of_rank(rank={rank}, tp_size={tp}, num_kv_heads={kv}) ({why})",
                                       [result])


@pytest.mark.task("04-weight-sharding/qkv-gqa")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("heads,kv,tp", KV_CASES, ids=[f"h{h}-kv{k}-tp{t}" for h, k, t in KV_CASES])
def test_shard_qkv(impl, heads, kv, tp, dtype):
    d = HEAD_DIM
    q = _numbered(heads * d, HIDDEN, dtype=dtype)
    k, v = _numbered(kv * d, HIDDEN, offset=1000, dtype=dtype), _numbered(kv * d, HIDDEN, offset=2000, dtype=dtype)
    results = adapters.one_batched(impl, [adapters.shard_qkv_call(q, k, v, rank, tp, heads, kv, d)
                                          for rank in range(tp)])
    for rank, result in enumerate(results):
        first, count = _expected_kv(rank, tp, heads, kv)
        local = heads // tp
        expected = torch.cat([q[rank * local * d:(rank + 1) * local * d], k[first * d:(first + count) * d],
                              v[first * d:(first + count) * d]])
        assert_returned(f"shard_qkv with {heads} heads / {kv} KV heads at tp={tp}, rank {rank}", [result])
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
    d = HEAD_DIM
    q, k, v = (_numbered(heads * d, HIDDEN) for heads in (HEADS, KV_HEADS, KV_HEADS))
    more = {"q": _numbered(HEADS * d + d, HIDDEN), "k": _numbered(KV_HEADS * d + d, HIDDEN)}
    k1, v1 = k[:d], v[:d]  # one KV head: 3 ranks may share it, but 8 query heads do not split 3 ways
    cases = [("8 heads (1 KV head) at tp=3", (q, k1, v1, 0, 3, HEADS, 1, d)),
             ("2 KV heads at tp=3 (8 heads do not split either)", (q, k, v, 0, 3, HEADS, KV_HEADS, d))]
    for name, full, extra in (("q", q, more["q"]), ("k", k, more["k"]), ("v", v, more["k"])):
        rows = full.shape[0]
        for wrong in (full[:rows - 1], full[:rows - d], extra[:rows + 1], extra):  # too few rows, too many
            parts = {"q": q, "k": k, "v": v, name: wrong}
            cases.append((f"a {name} of {wrong.shape[0]} rows for {rows} ({HEADS if name == 'q' else KV_HEADS} heads "
                          f"of {d})", (parts["q"], parts["k"], parts["v"], 1, 2, HEADS, KV_HEADS, d)))
    results = adapters.one_batched(impl, [adapters.shard_qkv_call(*args) for _, args in cases])
    for (what, _), result in zip(cases, results):
        assert_ranks_raise_value_error(f"shard_qkv with {what}", [result])


# ---- shard rules --------------------------------------------------------------------------------
def _checkpoint(dtype: torch.dtype = torch.float32, layers: int = 1) -> dict[str, torch.Tensor]:
    """A Qwen2-like checkpoint of `layers` layers (q/k/v biases, plus an o_proj bias and a q_norm) by name."""
    shapes = {"model.embed_tokens.weight": (VOCAB, HIDDEN), "model.norm.weight": (HIDDEN,),
              "lm_head.weight": (VOCAB, HIDDEN)}
    for index in range(layers):
        layer = f"model.layers.{index}."
        shapes |= {
            layer + "input_layernorm.weight": (HIDDEN,),
            layer + "self_attn.q_proj.weight": (HEADS * HEAD_DIM, HIDDEN),
            layer + "self_attn.q_proj.bias": (HEADS * HEAD_DIM,),
            layer + "self_attn.k_proj.weight": (KV_HEADS * HEAD_DIM, HIDDEN),
            layer + "self_attn.k_proj.bias": (KV_HEADS * HEAD_DIM,),
            layer + "self_attn.v_proj.weight": (KV_HEADS * HEAD_DIM, HIDDEN),
            layer + "self_attn.v_proj.bias": (KV_HEADS * HEAD_DIM,),
            layer + "self_attn.o_proj.weight": (HIDDEN, HEADS * HEAD_DIM), layer + "self_attn.o_proj.bias": (HIDDEN,),
            layer + "self_attn.q_norm.weight": (HEAD_DIM,),
            layer + "post_attention_layernorm.weight": (HIDDEN,),
            layer + "mlp.gate_proj.weight": (INTERMEDIATE, HIDDEN),
            layer + "mlp.up_proj.weight": (INTERMEDIATE, HIDDEN),
            layer + "mlp.down_proj.weight": (HIDDEN, INTERMEDIATE),
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
    if module in ("embed_tokens", "lm_head"):  # full: the whole [V, hidden] table
        size = -(-full.shape[0] // tp)
        shard = torch.zeros(size, full.shape[1], dtype=full.dtype)
        rows = full[rank * size:(rank + 1) * size]
        shard[:len(rows)] = rows
        return shard
    return full


def _shard_problem(name: str, full: torch.Tensor, result, expected: torch.Tensor) -> str | None:
    """What is wrong with one shard_tensor result, in words; None when it is right."""
    got = result.value
    if result.error is not None:
        if result.error["not_implemented"]:
            raise NotImplementedError(result.error["message"])
        return f"raised {result.error['type']}: {result.error['message']}"
    if "tensor" in changed(result, ("name", "tensor")):
        return "shard_tensor modified the full tensor"
    if not isinstance(got, torch.Tensor) or got.shape != expected.shape or not torch.equal(got, expected):
        return f"got {_where(full, got) if isinstance(got, torch.Tensor) else type(got).__name__}; " \
               f"expected {_where(full, expected)}"
    if got.dtype != full.dtype:
        return f"dtype {got.dtype}, expected {full.dtype} (keep the checkpoint's)"
    if result.aliased:
        return ("the result is a view of the full tensor, which then stays alive as long as the shard does; return "
                "a copy (.clone())")
    return None


@pytest.mark.task("04-weight-sharding/shard-rules", weight=4)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("tp", TP_SIZES, ids=[f"tp{tp}" for tp in TP_SIZES])
def test_shard_rules(impl, tp, dtype):
    config = _config()
    points = [(name, full, rank) for name, full in _checkpoint(dtype).items() if "rotary_emb" not in name
              for rank in range(tp)]
    results = adapters.one_batched(impl, [adapters.shard_tensor_call(name, full, rank, tp, config)
                                          for name, full, rank in points])
    problems, reported = [], set()
    for (name, full, rank), result in zip(points, results):
        if name not in reported and (problem := _shard_problem(name, full, result,
                                                               _expected_shard(name, full, rank, tp))):
            problems.append(f"{name} rank {rank}: {problem}")
            reported.add(name)
    if problems:
        raise WrongAnswer(f"shard_tensor at tp={tp}, {len(problems)} tensors wrong:\n  " + "\n  ".join(problems))


VOCAB_TP_SIZES = [1, 2, 3, 4]


@pytest.mark.task("04-weight-sharding/shard-rules", weight=4)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_vocab_shard_rule_at_every_padding(impl, dtype):
    """embed_tokens and lm_head at every V = 1 .. 3 * tp for tp = 1 .. 4, every rank: no padding, one
    short shard, two padded shards, shards that are all padding; the table in contiguous memory and not."""
    points = [(name, vocab, tp, rank, layout) for tp in VOCAB_TP_SIZES for vocab in range(1, 3 * tp + 1)
              for rank in range(tp) for name in ("model.embed_tokens.weight", "lm_head.weight")
              for layout in ("contiguous", "non-contiguous")]
    tables = {vocab: _numbered(vocab, 3, dtype=dtype) for vocab in range(1, 3 * max(VOCAB_TP_SIZES) + 1)}
    configs = {vocab: {**_config(), "vocab_size": vocab} for vocab in tables}
    requests = []
    for name, vocab, tp, rank, layout in points:
        request = adapters.shard_tensor_call(name, tables[vocab], rank, tp, configs[vocab])
        requests.append(adapters.noncontiguous(request, 1) if layout != "contiguous" else request)
    for (name, vocab, tp, rank, layout), result in zip(points, adapters.one_batched(impl, requests)):
        full = tables[vocab]
        if problem := _shard_problem(name, full, result, _expected_shard(name, full, rank, tp)):
            size = -(-vocab // tp)
            raise WrongAnswer(f"shard_tensor({name}, V={vocab}, tp={tp}: shards of {size} rows, {layout} table), "
                              f"rank {rank} (its ids {rank * size}..{(rank + 1) * size - 1}, of which "
                              f"{max(0, min(size, vocab - rank * size))} are real): {problem}")


@pytest.mark.task("04-weight-sharding/shard-rules")
@pytest.mark.error_case
def test_shard_rules_reject_uneven_splits(impl):
    """Every uneven split is refused, naming the tensor (the column and row splits) at every tp that does
    not divide, whatever the rank; KV heads that do not fit tp are refused too."""
    config, layer = _config(), "model.layers.0."
    cases = [(layer + "mlp.gate_proj.weight", (INTERMEDIATE, HIDDEN), tp, rank) for tp in (5, 7, 8)
             for rank in (0, tp - 1)]
    cases += [(layer + "self_attn.q_proj.bias", (HEADS * HEAD_DIM,), 3, 1)]
    cases += [(layer + "self_attn.o_proj.weight", (HIDDEN, 18), tp, rank) for tp in (4, 5) for rank in (0, tp - 1)]
    cases += [(layer + "mlp.down_proj.weight", (HIDDEN, INTERMEDIATE), 5, 2)]
    kv_cases = [(layer + f"self_attn.{kind}_proj.weight", (KV_HEADS * HEAD_DIM, HIDDEN), 3, rank)
                for kind in ("k", "v") for rank in (0, 2)]
    points = cases + kv_cases
    results = adapters.one_batched(impl, [adapters.shard_tensor_call(name, _numbered(*shape), rank, tp, config)
                                          for name, shape, tp, rank in points])
    for (name, shape, tp, rank), result in zip(points, results):
        named = (name, shape, tp, rank) in cases
        assert_ranks_raise_value_error(f"shard_tensor({name} of shape {shape}, rank {rank}, tp={tp})", [result],
                                       mentions=name if named else "")


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


# a shuffled checkpoint has two layers: their parts interleave, so a fused tensor is told by its layer too
STREAM_CASES = [(tp, tied, order, torch.float32) for tp in TP_SIZES for tied in (False, True)
                for order in ("sorted", "reversed", "shuffled")] + [(2, False, "shuffled", torch.bfloat16)]


def _stream_problem(where: str, result, expected: list, dtype: torch.dtype) -> str | None:
    if result.error is not None:
        if result.error["not_implemented"]:
            raise NotImplementedError(result.error["message"])
        return f"{where}: raised {result.error['type']}: {result.error['message']}"
    got = result.value if isinstance(result.value, list) else []
    if not all(isinstance(item, tuple) and len(item) == 3 and isinstance(item[0], str) for item in got):
        return f"{where}: shard_and_merge should yield (name, tensor) pairs, got {result.value!r:.200}"
    missing = sorted({n for n, _, _ in expected} - {n for n, _, _ in got})
    extra = sorted({n for n, _, _ in got} - {n for n, _, _ in expected})
    if missing or extra:
        return f"{where}: missing {missing}, unexpected {extra}"
    wanted = {n: (t, i) for n, t, i in expected}
    for name, tensor, after in got:
        t, i = wanted[name]
        if not isinstance(tensor, torch.Tensor) or tensor.shape != t.shape or not torch.equal(tensor, t):
            return (f"{where}: {name} differs from the expected {tuple(t.shape)} tensor (shard each part first, then "
                    "cat in q, k, v / gate, up order, the parts of this layer's tensor)")
        if tensor.dtype != dtype:
            return f"{where}: {name} has dtype {tensor.dtype}, expected the checkpoint's {dtype}"
        if after != i:
            return (f"{where}: {name} was yielded after reading {after + 1} tensors; it was complete after {i + 1} "
                    "(stream: yield each tensor as soon as it is complete)")
    if result.extra.get("kept_alive") is not None:
        return (f"{where}: the full tensor {result.extra['kept_alive']} was still alive two tensors later: keep the "
                "shards, not the full tensors, and yield copies, never views of them")
    return None


@pytest.mark.task("04-weight-sharding/shard-then-merge")
@pytest.mark.parametrize("tp,tied,order,dtype", STREAM_CASES, ids=[
    f"tp{tp}-{'tied' if tied else 'untied'}-{order}-{str(dtype)[6:]}" for tp, tied, order, dtype in STREAM_CASES])
def test_shard_and_merge(impl, tp, tied, order, dtype):
    checkpoint, config = _checkpoint(dtype, layers=2 if order == "shuffled" else 1), _config(tied)
    config["num_hidden_layers"] = 2 if order == "shuffled" else 1
    names = _order(list(checkpoint), order)
    stream = [(name, checkpoint[name]) for name in names]
    results = adapters.one_batched(impl, [adapters.shard_and_merge_call(stream, rank, tp, config)
                                          for rank in range(tp)])
    for rank, result in enumerate(results):
        where = (f"tp={tp} rank {rank}, {order} checkpoint order ({config['num_hidden_layers']} layer(s))"
                 f"{', tied' if tied else ''}, {dtype}")
        if problem := _stream_problem(where, result, _expected_stream(checkpoint, names, rank, tp, tied), dtype):
            raise WrongAnswer(problem)


@pytest.mark.task("04-weight-sharding/shard-then-merge")
@pytest.mark.error_case
def test_shard_and_merge_names_missing_parts(impl):
    """A checkpoint of two layers that ends with one fused tensor still missing a part: the ValueError
    names that tensor (layer and all), whichever layer and part it is."""
    full = _checkpoint(layers=2)
    config = {**_config(), "num_hidden_layers": 2}
    cases = [("model.layers.1.self_attn.v_proj.", "model.layers.1.self_attn.qkv_proj.weight"),
             ("model.layers.0.self_attn.q_proj.", "model.layers.0.self_attn.qkv_proj.weight"),
             ("model.layers.1.mlp.up_proj.", "model.layers.1.mlp.gate_up_proj.weight")]
    requests = [adapters.shard_and_merge_call(sorted((n, t) for n, t in full.items() if not n.startswith(dropped)),
                                              0, 2, config) for dropped, _ in cases]
    for (dropped, fused), result in zip(cases, adapters.one_batched(impl, requests)):
        assert_ranks_raise_value_error(f"shard_and_merge of a two-layer checkpoint without {dropped}*", [result],
                                       mentions=fused)
