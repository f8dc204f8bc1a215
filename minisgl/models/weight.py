"""Streaming weight loading: shard each checkpoint tensor for this rank first, then merge
q/k/v -> qkv_proj and gate/up -> gate_up_proj (chapter 04).

Only one full tensor is in host memory at a time (the one just read), plus the shards waiting in
the merge buffer for their partners; the whole checkpoint never is.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import safetensors
import torch
from gguf import GGUFReader
from tqdm.auto import tqdm

from minisgl.layers import custom_tp_ops, kv_head_offset, local_kv_heads, vocab_shard_size
from minisgl.layers.base import Weight
from minisgl.layers.quantized import INT8_GROUP_SIZE, Int4Weight, quantize_q8_0

from .config import ModelConfig, ModelError
from .expert_weights import ExpertStacker
from .gguf_weights import block_quantized_names, hf_tensor_name, iter_gguf_tensors, require_model_gguf

Shardable = torch.Tensor | Int4Weight  # what the loader streams: dense tensors and 4-bit weights

COLUMN_PARALLEL = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")  # split dim 0 (outputs)
ROW_PARALLEL = ("o_proj", "down_proj")  # split dim 1 (inputs); their biases stay whole
VOCAB_PARALLEL = ("embed_tokens", "lm_head")  # split dim 0 (vocab rows), padded to tp * shard_size

# checkpoint projection -> (fused projection, position inside it)
MERGE_SLOTS: dict[str, tuple[str, int]] = {
    "q_proj": ("qkv_proj", 0),
    "k_proj": ("qkv_proj", 1),
    "v_proj": ("qkv_proj", 2),
    "gate_proj": ("gate_up_proj", 0),
    "up_proj": ("gate_up_proj", 1),
}
MERGE_SIZES = {"qkv_proj": 3, "gate_up_proj": 2}


def _module_name(tensor_name: str) -> str:
    """`model.layers.0.self_attn.q_proj.weight` -> `q_proj`."""
    parts = tensor_name.split(".")
    return parts[-2] if len(parts) >= 2 else ""


def shard_tensor(name: str, tensor: Shardable, rank: int, tp_size: int, config: ModelConfig) -> Shardable:
    """The part of checkpoint tensor `name` that rank `rank` of `tp_size` holds (a fresh copy).

    A 4-bit `Int4Weight` shards like a dense weight: its codes are an [out, in] tensor, and its
    per-group scales follow their rows (column parallel) or their input groups (row parallel).
    """
    module = _module_name(name)
    is_weight = name.endswith(".weight")
    if module in ("k_proj", "v_proj"):
        # By KV head, not an even chunk: with fewer KV heads than ranks, neighbours share one head.
        num_local = local_kv_heads(config.num_kv_heads, tp_size)
        first_head = kv_head_offset(rank, config.num_kv_heads, tp_size)
        return tensor.narrow(0, first_head * config.head_dim, num_local * config.head_dim).clone()
    if module in COLUMN_PARALLEL:
        return _even_shard(name, tensor, 0, rank, tp_size)
    if module in ROW_PARALLEL and is_weight:
        return _even_shard(name, tensor, 1, rank, tp_size)
    if module in VOCAB_PARALLEL:
        shard_size = vocab_shard_size(config.vocab_size, tp_size)
        start = rank * shard_size
        rows = tensor[start : min(start + shard_size, config.vocab_size)]
        shard = torch.zeros(shard_size, *tensor.shape[1:], dtype=tensor.dtype)  # padding rows stay 0
        shard[: rows.shape[0]] = rows
        return shard
    return tensor.clone()  # norms and row-parallel biases: every rank keeps the whole tensor


def _even_shard(name: str, tensor: Shardable, dim: int, rank: int, tp_size: int) -> Shardable:
    """Slice `rank` of `tp_size` equal slices along `dim` (a copy)."""
    size = tensor.shape[dim] // tp_size
    if isinstance(tensor, Int4Weight) and dim == 1 and size % tensor.group_size:
        raise ModelError(
            f"tp_size={tp_size} splits the {tensor.shape[1]} inputs of {name} into shards of {size}, which cut "
            f"through its {tensor.group_size}-input quantization groups; use --quantization none or another tp size"
        )
    return tensor.narrow(dim, rank * size, size).clone()


def merged_name(name: str) -> tuple[str, int] | None:
    """(fused tensor name, slot) for a tensor that is merged, else None."""
    module = _module_name(name)
    if module not in MERGE_SLOTS:
        return None
    fused, slot = MERGE_SLOTS[module]
    return name.replace(f".{module}.", f".{fused}."), slot


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


def shard_and_merge(
    tensors: Iterable[tuple[str, Shardable]],
    config: ModelConfig,
    rank: int,
    tp_size: int,
    dtype: torch.dtype | None = None,
) -> Iterator[tuple[str, Shardable]]:
    """The streaming rule: shard each checkpoint tensor as it arrives (and drop the full one), then
    hold the shards of q/k/v and gate/up until their group is complete and emit the fused tensor.

    Yields (engine weight name, this rank's tensor). At any moment only the tensor being sharded
    and the incomplete merge groups are alive.
    """
    merge_buffer: dict[str, dict[int, Shardable]] = {}
    experts = ExpertStacker(config, rank, tp_size, dtype)  # mixture-of-experts layers (chapter 14)
    for name, full in tensors:
        if "rotary_emb" in name or (config.tie_word_embeddings and name.startswith("lm_head.")):
            continue  # recomputed at start-up / shared with the embedding
        if experts.owns(name):
            stacked = experts.add(name, full)
            del full
            if stacked is not None:
                yield stacked
            continue
        local = shard_tensor(name, full, rank, tp_size, config)
        del full  # from here on only the shard is alive
        if dtype is not None and isinstance(local, torch.Tensor):  # 4-bit weights keep their codes
            local = local.to(dtype)
        merge = merged_name(name)
        if merge is None:
            yield name, local
            continue
        fused, slot = merge
        parts = merge_buffer.setdefault(fused, {})
        parts[slot] = local
        if len(parts) == MERGE_SIZES[fused.split(".")[-2]]:
            del merge_buffer[fused]
            yield fused, _cat_rows([parts[i] for i in range(len(parts))])  # slot order, not arrival
    if merge_buffer:
        raise ModelError(f"checkpoint is missing parts of {sorted(merge_buffer)[:3]}")
    experts.check_complete()


def _cat_rows(parts: list[Shardable]) -> Shardable:
    """Fuse the parts in slot order; 4-bit only when every part is (a GGUF may store v_proj in 8
    bits next to a 4-bit q_proj: then the fused weight is dense)."""
    if all(isinstance(part, Int4Weight) for part in parts):
        return Int4Weight.cat_rows(parts)
    dtype = next(part.dtype for part in parts if isinstance(part, torch.Tensor))
    return torch.cat([part.dequantize().to(dtype) if isinstance(part, Int4Weight) else part for part in parts])


def load_weights(
    model_dir: Path,
    config: ModelConfig,
    rank: int,
    tp_size: int,
    dtype: torch.dtype,
    device: torch.device,
    progress: bool = True,
    keep: Callable[[str], bool] | None = None,
    quantization: str = "none",
    max_quantized_rows: int | None = None,
    batch_invariant: bool = False,
) -> Iterator[tuple[str, Weight]]:
    """Yield (engine weight name, local weight on `device`) for every weight of the checkpoint; with
    `keep`, only of the checkpoint tensors it accepts (a pipeline stage's, chapter 13).

    quantization "gguf" reads the checkpoint's GGUF file instead of its safetensors: 4-bit linear
    weights are sharded and merged as `Int4Weight`s, then packed for the CPU int4 kernel, and an LM
    head the GGUF stores block-quantized (SmolLM2's Q8_0) is packed for the int8 kernel; both keep a
    dense copy for batches above `max_quantized_rows` rows, and with `batch_invariant` (--deterministic)
    one kernel for every batch size (`Int4Weight.pack`).
    """
    int8_head = None  # the LM head weight's name when it becomes an 8-bit weight
    if quantization == "gguf":
        reader = GGUFReader(require_model_gguf(model_dir))
        source = iter_gguf_tensors(reader, config.num_heads, config.num_kv_heads, keep_int4=True, keep=keep)
        total = sum(1 for t in reader.tensors if keep is None or keep(hf_tensor_name(t.name)))
        head = "model.embed_tokens.weight" if config.tie_word_embeddings else "lm_head.weight"
        if head in block_quantized_names(reader) and config.hidden_size % INT8_GROUP_SIZE == 0:
            int8_head = head
    else:
        source, total = iter_checkpoint(model_dir, keep), count_tensors(model_dir, keep)
    tensors = tqdm(source, total=total, desc=f"Loading weights (rank {rank})", unit="tensor",
                   disable=not progress, leave=False)
    for name, local in _to_local(tensors, config, rank, tp_size, dtype, device):
        if isinstance(local, Int4Weight):
            yield name, local.pack(dtype, max_quantized_rows, batch_invariant)
        elif name == int8_head:
            # after sharding: vocab shards hold whole rows, and Q8_0's rule gives back the GGUF's own
            # codes and scales; a tied embedding keeps its dense rows for lookups
            yield name, quantize_q8_0(local, max_quantized_rows, keep_dense=config.tie_word_embeddings,
                                      batch_invariant=batch_invariant)
        else:
            yield name, local


def _to_local(
    tensors: Iterable[tuple[str, Shardable]],
    config: ModelConfig,
    rank: int,
    tp_size: int,
    dtype: torch.dtype,
    device: torch.device,
) -> Iterator[tuple[str, Shardable]]:
    """Full checkpoint tensors -> this rank's engine tensors on `device`, through `shard_and_merge`
    (or the capstone's replacement for it, minisgl/layers/tp_ops.py; dense weights only). 4-bit
    weights stay on the CPU, for `load_weights` to pack."""
    ops = custom_tp_ops()
    if ops is not None:
        for name, local in ops.shard_and_merge(tensors, rank, tp_size, config):
            yield name, local.to(dtype=dtype, device=device)
        return
    for name, local in shard_and_merge(tensors, config, rank, tp_size, dtype):
        yield name, local.to(device) if isinstance(local, torch.Tensor) else local


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


def load_dummy_weights(
    config: ModelConfig, rank: int, tp_size: int, dtype: torch.dtype, device: torch.device, seed: int,
    keep: Callable[[str], bool] | None = None,
) -> Iterator[tuple[str, torch.Tensor]]:
    """Like `load_weights`, from `dummy_checkpoint` instead of files: the same shard-then-merge."""
    yield from _to_local(dummy_checkpoint(config, seed, device, keep), config, rank, tp_size, dtype, device)
