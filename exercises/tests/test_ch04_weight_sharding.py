"""Grades chapter 04 in one process (sharding is a pure function of rank and tp): the KV-head map,
the fused QKV shard, every shard rule, and the streaming shard-then-merge loader.

Every full tensor holds 1, 2, 3, ... so each value names the element it came from, and a wrong
shard can be described ("rank 1 got rows 0..7 of q_proj.weight").
"""

from __future__ import annotations

import pytest
import torch

from exercises.grader import adapters
from exercises.grader.outcomes import WrongAnswer
from minisgl.models.config import ModelConfig

HEADS, KV_HEADS, HEAD_DIM, HIDDEN, INTERMEDIATE, VOCAB = 8, 2, 2, 6, 12, 11


def _config(tied: bool = False) -> ModelConfig:
    return ModelConfig.from_dict({
        "architectures": ["Qwen2ForCausalLM"], "hidden_size": HIDDEN, "num_hidden_layers": 1,
        "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM,
        "intermediate_size": INTERMEDIATE, "vocab_size": VOCAB, "tie_word_embeddings": tied,
    })


def _numbered(*shape: int, offset: int = 0) -> torch.Tensor:
    return torch.arange(1, 1 + torch.Size(shape).numel(), dtype=torch.float32).reshape(shape) + offset


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
KV_CASES = [(8, 2, 2), (8, 2, 4), (8, 1, 4), (8, 4, 2), (8, 8, 4), (6, 3, 3), (8, 2, 8)]  # heads, kv, tp


@pytest.mark.task("04-weight-sharding/qkv-gqa", weight=3)
def test_kv_heads_of_rank(impl):
    for heads, kv, tp in KV_CASES:
        for rank in range(tp):
            got = tuple(adapters.kv_heads_of_rank(impl, rank, tp, kv))
            expected = _expected_kv(rank, tp, heads, kv)
            if got != expected:
                raise WrongAnswer(f"{kv} KV heads at tp={tp}: rank {rank} got (first, count) {got}, expected {expected} "
                                  f"(its query heads {rank * heads // tp}..{(rank + 1) * heads // tp - 1} attend with KV head {expected[0]})")
    for kv, tp in [(3, 2), (2, 3)]:
        with pytest.raises(ValueError):
            adapters.kv_heads_of_rank(impl, 0, tp, kv)


@pytest.mark.task("04-weight-sharding/qkv-gqa")
@pytest.mark.parametrize("heads,kv,tp", KV_CASES, ids=[f"h{h}-kv{k}-tp{t}" for h, k, t in KV_CASES])
def test_shard_qkv(impl, heads, kv, tp):
    d = HEAD_DIM
    q, k, v = _numbered(heads * d, HIDDEN), _numbered(kv * d, HIDDEN, offset=1000), _numbered(kv * d, HIDDEN, offset=2000)
    for rank in range(tp):
        first, count = _expected_kv(rank, tp, heads, kv)
        local = heads // tp
        expected = torch.cat([q[rank * local * d:(rank + 1) * local * d], k[first * d:(first + count) * d],
                              v[first * d:(first + count) * d]])
        got = adapters.shard_qkv(impl, q, k, v, rank, tp, heads, kv, d)
        if not isinstance(got, torch.Tensor) or got.shape != expected.shape or not torch.equal(got, expected):
            shape = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
            held = sorted({int(x) // 1000 * 1000 + (int(x) % 1000 - 1) // (HIDDEN * d)
                           for x in got[:, 0].tolist()}) if isinstance(got, torch.Tensor) and got.numel() else []
            raise WrongAnswer(f"{heads} heads / {kv} KV heads at tp={tp}, rank {rank}: got shape {shape}, expected "
                              f"{tuple(expected.shape)} = q heads {rank * local}..{(rank + 1) * local - 1}, then k and v of "
                              f"KV head(s) {first}..{first + count - 1}; rows held (1000 = k, 2000 = v, + head): {held}")


# ---- shard rules --------------------------------------------------------------------------------
def _checkpoint(tied: bool = False) -> dict[str, torch.Tensor]:
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
    return {name: _numbered(*shape, offset=100_000 * i) for i, (name, shape) in enumerate(sorted(shapes.items()))}


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
        shard = torch.zeros(size, full.shape[1])
        rows = full[rank * size:(rank + 1) * size]
        shard[:len(rows)] = rows
        return shard
    return full


@pytest.mark.task("04-weight-sharding/shard-rules", weight=4)
def test_shard_rules(impl, world_size):
    config, problems = _config(), []
    for name, full in _checkpoint().items():
        if "rotary_emb" in name:
            continue
        for rank in range(world_size):
            expected = _expected_shard(name, full, rank, world_size)
            got = adapters.shard_tensor(impl, name, full.clone(), rank, world_size, config)
            if not isinstance(got, torch.Tensor) or got.shape != expected.shape or not torch.equal(got, expected):
                where = _where(full, got) if isinstance(got, torch.Tensor) else type(got).__name__
                problems.append(f"{name} rank {rank}: got {where}; expected {_where(full, expected)}")
                break
    if problems:
        raise WrongAnswer(f"shard_tensor at tp={world_size}, {len(problems)} tensors wrong:\n  " + "\n  ".join(problems))


@pytest.mark.task("04-weight-sharding/shard-rules")
def test_shards_do_not_pin_the_full_tensor(impl, world_size):
    config = _config()
    for name in ("model.layers.0.mlp.down_proj.weight", "model.layers.0.self_attn.k_proj.weight", "lm_head.weight"):
        full = _checkpoint()[name]
        got = adapters.shard_tensor(impl, name, full, world_size - 1, world_size, config)
        if got.untyped_storage().data_ptr() == full.untyped_storage().data_ptr():
            raise WrongAnswer(f"{name}: the shard is a view of the full tensor, which stays alive as long as the "
                              "shard does; return a copy (.clone() / .contiguous() of a slice)")


# ---- streaming shard, then merge ----------------------------------------------------------------
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


@pytest.mark.task("04-weight-sharding/shard-then-merge")
@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
@pytest.mark.parametrize("order", ["sorted", "reversed"])
def test_shard_and_merge(impl, world_size, tied, order):
    checkpoint, config = _checkpoint(), _config(tied)
    names = sorted(checkpoint) if order == "sorted" else sorted(checkpoint, reverse=True)
    for rank in range(world_size):
        consumed = 0

        def source():
            nonlocal consumed
            for name in names:
                consumed += 1
                yield name, checkpoint[name].clone()

        expected = _expected_stream(checkpoint, names, rank, world_size, tied)
        got = []
        for name, tensor in adapters.shard_and_merge(impl, source(), rank, world_size, config):
            got.append((name, tensor, consumed - 1))
        where = f"tp={world_size} rank {rank}, {order} checkpoint order{', tied' if tied else ''}"
        missing = sorted({n for n, _, _ in expected} - {n for n, _, _ in got})
        extra = sorted({n for n, _, _ in got} - {n for n, _, _ in expected})
        if missing or extra:
            raise WrongAnswer(f"{where}: missing {missing}, unexpected {extra}")
        wanted = {n: (t, i) for n, t, i in expected}
        for name, tensor, after in got:
            t, i = wanted[name]
            if tensor.shape != t.shape or not torch.equal(tensor, t):
                raise WrongAnswer(f"{where}: {name} has shape {tuple(tensor.shape)} and differs from the expected "
                                  f"{tuple(t.shape)} (shard each part first, then cat in q, k, v / gate, up order)")
            if after != i:
                raise WrongAnswer(f"{where}: {name} was yielded after reading {after + 1} tensors; it was complete "
                                  f"after {i + 1} (stream: yield each tensor as soon as it is complete)")
