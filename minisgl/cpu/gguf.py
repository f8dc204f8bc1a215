"""`--quantization gguf`: the checkpoint's GGUF as the loader's source, its 4-bit weights kept 4-bit
(chapter 16, "4-bit shards").

The GGUF next to a converted checkpoint (the embedded SmolLM2's is Q4_1) is read with the same walk
as the conversion (minisgl/models/gguf_weights.py), except that the 4-bit linear weights (Q4_0,
Q4_1) come as `Int4Weight`s with their own scales; every other tensor (norms, the embedding, Q8_0 /
K-quant / float tensors) arrives dequantized, as in the conversion. The loader shards and merges
both kinds with one code (minisgl/models/weight.py: an `Int4Weight` offers the tensor methods its
shard rules call). Once the model holds them, `pack_gguf_weights` puts each 4-bit weight in its
kernel's form, and a block-quantized LM head (SmolLM2's Q8_0) into 8-bit blocks; Q8_0 projections
stay dense, since PyTorch's int8 kernel takes one call per 32 inputs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import torch
from gguf import GGMLQuantizationType, GGUFReader, ReaderTensor

from minisgl.layers import BaseOP, LinearBase, ParallelLMHead
from minisgl.models.config import ModelConfig, ModelError
from minisgl.models.gguf_weights import (dequantize_tensor, find_model_gguf, hf_tensor_name, iter_gguf_tensors,
                                         torch_shape)

from .quantized import INT8_GROUP_SIZE, Int4Weight, quantize_q8_0

# GGUF block types that are int4 codes with a per-32 scale (and min): bytes per block, has a min
INT4_BLOCK_TYPES = {GGMLQuantizationType.Q4_0: (18, False), GGMLQuantizationType.Q4_1: (20, True)}
GGUF_BLOCK_SIZE = 32
FLOAT_TYPES = {GGMLQuantizationType.F32, GGMLQuantizationType.F16, GGMLQuantizationType.BF16}


class GGUFCheckpoint:
    """The loader's source for a checkpoint's GGUF: (Hugging Face name, full tensor or `Int4Weight`),
    one at a time, and how many (for the progress bar)."""

    def __init__(self, model_dir: Path, config: ModelConfig, keep: Callable[[str], bool] | None = None) -> None:
        self.reader = GGUFReader(require_model_gguf(model_dir))
        self.config, self.keep = config, keep

    def __iter__(self) -> Iterator[tuple[str, torch.Tensor | Int4Weight]]:
        return iter_gguf_tensors(self.reader, self.config.num_heads, self.config.num_kv_heads, self.keep,
                                 read=read_keeping_int4)

    def __len__(self) -> int:
        return sum(1 for t in self.reader.tensors if self.keep is None or self.keep(hf_tensor_name(t.name)))


def require_model_gguf(model_dir: Path) -> Path:
    path = find_model_gguf(model_dir)
    if path is None:
        raise ModelError(f"--quantization gguf reads a *.gguf file next to the checkpoint, and '{model_dir}' has "
                         "none; use --quantization none")
    return path


def read_keeping_int4(name: str, gguf_tensor: ReaderTensor) -> torch.Tensor | Int4Weight:
    """Q4_0 / Q4_1 projection weights as `Int4Weight`, everything else dequantized to float32."""
    if gguf_tensor.tensor_type in INT4_BLOCK_TYPES and name.endswith("_proj.weight"):
        return int4_weight(gguf_tensor)
    return dequantize_tensor(gguf_tensor)


def int4_weight(gguf_tensor: ReaderTensor) -> Int4Weight:
    """A Q4_0 / Q4_1 tensor as codes, scales and minimums, without rounding anything.

    Each block of 32 inputs is a float16 scale d, (Q4_1 only) a float16 minimum m, and 16 bytes of
    codes q: byte i holds input i in its low nibble and input i + 16 in its high nibble.
    Q4_1 means W = d * q + m; Q4_0 means W = d * (q - 8), i.e. minimum -8d.
    """
    block_bytes, has_min = INT4_BLOCK_TYPES[gguf_tensor.tensor_type]
    out_features, in_features = torch_shape(gguf_tensor)
    blocks = np.asarray(gguf_tensor.data).reshape(out_features, in_features // GGUF_BLOCK_SIZE, block_bytes)
    scale = blocks[..., 0:2].copy().view(np.float16).astype(np.float32)[..., 0]  # [out, groups]
    if has_min:
        minimum = blocks[..., 2:4].copy().view(np.float16).astype(np.float32)[..., 0]
    else:
        minimum = -8 * scale  # exact: a power-of-two multiple of a float16 value
    packed = blocks[..., 4 if has_min else 2 :]  # [out, groups, 16]
    codes = np.concatenate([packed & 0x0F, packed >> 4], axis=-1)  # [out, groups, 32]: low nibbles first
    return Int4Weight(
        torch.from_numpy(codes.reshape(out_features, in_features)),
        torch.from_numpy(scale),
        torch.from_numpy(minimum),
        GGUF_BLOCK_SIZE,
    )


def block_quantized_names(reader: GGUFReader) -> set[str]:
    """Hugging Face names of the tensors the file stores in a block-quantized type (not F32/F16/BF16)."""
    return {hf_tensor_name(t.name) for t in reader.tensors if t.tensor_type not in FLOAT_TYPES}


def pack_gguf_weights(model: BaseOP, model_dir: Path, config: ModelConfig, dtype: torch.dtype,
                      max_quantized_rows: int | None, batch_invariant: bool) -> None:
    """In place, once the model holds the GGUF's weights: every 4-bit linear weight in its kernel's
    form, with a dense copy in `dtype` for batches above `max_quantized_rows` rows (`Int4Weight.pack`),
    and an LM head the GGUF stores block-quantized as 8-bit blocks (Q8_0's rule gives back the GGUF's
    own codes and scales; vocab shards hold whole rows); a tied embedding keeps its dense rows for
    lookups. `batch_invariant` (--deterministic): one kernel for every batch size."""
    head = "model.embed_tokens.weight" if config.tie_word_embeddings else "lm_head.weight"
    int8_head = head in block_quantized_names(GGUFReader(require_model_gguf(model_dir)))
    for op in model.walk():
        if isinstance(op, LinearBase) and isinstance(op.weight, Int4Weight):
            op.weight = op.weight.pack(dtype, max_quantized_rows, batch_invariant)
        elif isinstance(op, ParallelLMHead) and int8_head and config.hidden_size % INT8_GROUP_SIZE == 0:
            owner = op if op._tied_embedding is None else op._tied_embedding  # a tied head reads the embedding
            owner.weight = quantize_q8_0(owner.weight, max_quantized_rows, keep_dense=owner is not op,
                                         batch_invariant=batch_invariant)
