"""A checkpoint as the loader reads it: (name, full tensor), one tensor at a time (chapter 04).

`iter_checkpoint` reads a Hugging Face checkpoint's safetensors files; `dummy_checkpoint` draws a
random checkpoint of a config's shapes (benchmarks of shapes without weights). The loader
(weight.py) takes either stream, as it takes the CPU plug-in's GGUF (minisgl/cpu/gguf.py).
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import safetensors
import torch

from .config import ModelConfig, ModelError


def checkpoint_files(model_dir: Path) -> list[Path]:
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return [model_dir / shard for shard in shards]
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise ModelError(f"'{model_dir}' has no *.safetensors weights (use --load-format dummy for random weights)")
    return files


def iter_checkpoint(model_dir: Path, keep: Callable[[str], bool] | None = None) -> Iterator[tuple[str, torch.Tensor]]:
    """Every tensor of the checkpoint (those whose name `keep` accepts), read one at a time."""
    for path in checkpoint_files(model_dir):
        with safetensors.safe_open(str(path), framework="pt", device="cpu") as f:
            for name in f.keys():
                if keep is None or keep(name):
                    yield name, f.get_tensor(name)


def count_tensors(model_dir: Path, keep: Callable[[str], bool] | None = None) -> int:
    total = 0
    for path in checkpoint_files(model_dir):
        with safetensors.safe_open(str(path), framework="pt", device="cpu") as f:
            total += sum(1 for name in f.keys() if keep is None or keep(name))
    return total


def checkpoint_shapes(config: ModelConfig) -> Iterator[tuple[str, tuple[int, ...]]]:
    """(name, full shape) of every tensor a Hugging Face checkpoint of `config` holds, in file order."""
    hidden, head_dim, inter = config.hidden_size, config.head_dim, config.intermediate_size
    q_rows, kv_rows = config.num_heads * head_dim, config.num_kv_heads * head_dim
    yield "model.embed_tokens.weight", (config.vocab_size, hidden)
    for i in range(config.num_layers):
        attn, mlp = f"model.layers.{i}.self_attn.", f"model.layers.{i}.mlp."
        yield f"model.layers.{i}.input_layernorm.weight", (hidden,)
        for proj, rows in (("q_proj", q_rows), ("k_proj", kv_rows), ("v_proj", kv_rows)):
            yield f"{attn}{proj}.weight", (rows, hidden)
            if config.qkv_bias:
                yield f"{attn}{proj}.bias", (rows,)
        yield f"{attn}o_proj.weight", (hidden, q_rows)
        if config.o_bias:
            yield f"{attn}o_proj.bias", (hidden,)
        if config.qk_norm:
            yield f"{attn}q_norm.weight", (head_dim,)
            yield f"{attn}k_norm.weight", (head_dim,)
        yield f"model.layers.{i}.post_attention_layernorm.weight", (hidden,)
        if config.is_moe_layer(i):  # the router, then every expert's MLP (chapter 14)
            yield f"{mlp}gate.weight", (config.num_experts, hidden)
            experts = [(f"{mlp}experts.{e}.", config.moe_intermediate_size) for e in range(config.num_experts)]
        else:
            experts = [(mlp, inter)]
        for prefix, width in experts:
            yield f"{prefix}gate_proj.weight", (width, hidden)
            yield f"{prefix}up_proj.weight", (width, hidden)
            yield f"{prefix}down_proj.weight", (hidden, width)
    yield "model.norm.weight", (hidden,)
    if not config.tie_word_embeddings:
        yield "lm_head.weight", (config.vocab_size, hidden)


def dummy_checkpoint(
    config: ModelConfig, seed: int, device: torch.device, keep: Callable[[str], bool] | None = None
) -> Iterator[tuple[str, torch.Tensor]]:
    """A random checkpoint of `config`, one full tensor at a time, made on `device` (benchmarks of
    shapes without weights). Each tensor draws from its own generator, seeded by `seed` and the
    tensor's name, so every rank of every tp size sees the same full tensor before sharding it:
    dummy weights are the same model at tp = 1, 2, 4, ... Norms are ones, the rest N(0, 0.02²)."""
    for name, shape in checkpoint_shapes(config):
        if keep is not None and not keep(name):
            continue  # another pipeline stage's tensor: not even drawn
        if name.endswith("norm.weight"):
            yield name, torch.ones(shape, device=device)
            continue
        generator = torch.Generator(device=device).manual_seed(zlib.crc32(f"{seed}:{name}".encode()))
        yield name, torch.randn(shape, generator=generator, device=device).mul_(0.02)
