"""A llama.cpp GGUF file read as Hugging Face-named tensors, one at a time (chapter 04).

Converting the embedded model dequantizes every tensor to float32. With `--quantization gguf`
the loader reads the GGUF next to the converted checkpoint instead and keeps the 4-bit linear
weights (Q4_0, Q4_1) 4-bit, as `Int4Weight`s with their own scales; every other tensor (norms,
the embedding, Q8_0 / K-quant / float tensors) arrives dequantized, as in the conversion (the loader
then packs a block-quantized LM head, such as SmolLM2's Q8_0 one, for the int8 kernel; Q8_0
projections stay dense, since that kernel takes one call per 32 inputs).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import torch
from gguf import GGMLQuantizationType, GGUFReader, ReaderTensor
from gguf.quants import dequantize

from minisgl.layers.quantized import Int4Weight

from .config import ModelError

# GGUF per-layer tensor name -> Hugging Face Llama name, both without the layer prefix.
LAYER_TENSOR_NAMES = {
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
}
# Tensors outside the layer stack (`output.weight` is absent when the LM head is tied to the embedding).
GLOBAL_TENSOR_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
# GGUF block types that are int4 codes with a per-32 scale (and min): bytes per block, has a min
INT4_BLOCK_TYPES = {GGMLQuantizationType.Q4_0: (18, False), GGMLQuantizationType.Q4_1: (20, True)}
GGUF_BLOCK_SIZE = 32
FLOAT_TYPES = {GGMLQuantizationType.F32, GGMLQuantizationType.F16, GGMLQuantizationType.BF16}


def find_model_gguf(model_dir: Path) -> Path | None:
    """The one `*.gguf` file in a checkpoint directory, or None when it has none."""
    files = sorted(path for path in model_dir.glob("*.gguf") if path.is_file())  # skips dangling links
    if len(files) > 1:
        raise ModelError(f"'{model_dir}' holds several GGUF files ({', '.join(f.name for f in files)}); keep one")
    return files[0] if files else None


def require_model_gguf(model_dir: Path) -> Path:
    path = find_model_gguf(model_dir)
    if path is None:
        raise ModelError(f"--quantization gguf reads a *.gguf file next to the checkpoint, and '{model_dir}' has "
                         "none; use --quantization none")
    return path


def block_quantized_names(reader: GGUFReader) -> set[str]:
    """Hugging Face names of the tensors the file stores in a block-quantized type (not F32/F16/BF16)."""
    return {hf_tensor_name(t.name) for t in reader.tensors if t.tensor_type not in FLOAT_TYPES}


def iter_gguf_tensors(
    reader: GGUFReader, num_heads: int, num_kv_heads: int, keep_int4: bool, keep: Callable[[str], bool] | None = None
) -> Iterator[tuple[str, torch.Tensor | Int4Weight]]:
    """(Hugging Face name, tensor) for every tensor of the file (that `keep` accepts: a pipeline
    stage's), in file order. With `keep_int4`, Q4_0 / Q4_1 projection weights come as `Int4Weight`,
    everything else as float32."""
    for gguf_tensor in reader.tensors:
        name = hf_tensor_name(gguf_tensor.name)
        if keep is not None and not keep(name):
            continue
        is_int4 = gguf_tensor.tensor_type in INT4_BLOCK_TYPES
        if keep_int4 and is_int4 and name.endswith("_proj.weight"):
            weight: torch.Tensor | Int4Weight = int4_weight(gguf_tensor)
        else:
            weight = dequantize_tensor(gguf_tensor)
        if name.endswith("q_proj.weight"):
            weight = undo_llama_cpp_rope_permutation(weight, num_heads)
        elif name.endswith("k_proj.weight"):
            weight = undo_llama_cpp_rope_permutation(weight, num_kv_heads)
        yield name, weight


def hf_tensor_name(gguf_name: str) -> str:
    """`blk.3.attn_q.weight` -> `model.layers.3.self_attn.q_proj.weight`, and so on."""
    if gguf_name in GLOBAL_TENSOR_NAMES:
        return GLOBAL_TENSOR_NAMES[gguf_name]
    parts = gguf_name.split(".", 2)  # ["blk", "3", "attn_q.weight"]
    if len(parts) == 3 and parts[0] == "blk" and parts[2] in LAYER_TENSOR_NAMES:
        return f"model.layers.{parts[1]}.{LAYER_TENSOR_NAMES[parts[2]]}"
    raise ValueError(f"no Hugging Face name known for GGUF tensor {gguf_name!r}")


def torch_shape(gguf_tensor: ReaderTensor) -> tuple[int, ...]:
    """GGUF lists dimensions fastest-varying first (`shape` = [in, out] for a linear layer), the
    reverse of PyTorch; the data itself is already laid out row-major as [out, in]."""
    return tuple(int(dim) for dim in reversed(gguf_tensor.shape))


def dequantize_tensor(gguf_tensor: ReaderTensor) -> torch.Tensor:
    """Expand one (possibly 4- or 8-bit block-quantized) GGUF tensor to fp32."""
    # `gguf_tensor.data` is a view into the memory-mapped file with one row of quantized blocks
    # per output row; dequantize turns each row of blocks back into float values.
    values = dequantize(gguf_tensor.data, gguf_tensor.tensor_type)
    # Copy: unquantized tensors come back as read-only views into the mmapped file.
    return torch.tensor(values, dtype=torch.float32).reshape(torch_shape(gguf_tensor))


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


def rope_row_order(out_features: int, num_heads: int) -> torch.Tensor:
    """For each Hugging Face row of a q_proj/k_proj weight, the GGUF row it comes from.

    Rotary embedding rotates pairs of features within each head. Hugging Face Llama pairs
    feature j with feature j + head_dim/2 ("rotate_half"); llama.cpp pairs neighbours 2j and
    2j + 1. So llama.cpp's converter reorders each head's output rows: HF row (s * head_dim/2 + j)
    becomes GGUF row (2j + s), for s in {0, 1}.
    """
    half_head_dim = out_features // num_heads // 2
    gguf_rows = torch.arange(out_features).reshape(num_heads, half_head_dim, 2)  # GGUF order (head, j, s)
    return gguf_rows.transpose(1, 2).reshape(-1)  # read in HF order (head, s, j)


def undo_llama_cpp_rope_permutation(
    weight: torch.Tensor | Int4Weight, num_heads: int
) -> torch.Tensor | Int4Weight:
    """Put the rows of a q_proj/k_proj weight back in Hugging Face order (rows move whole, with
    their quantization scales). For k_proj, num_heads is the number of KV heads."""
    return weight.index_select(0, rope_row_order(weight.shape[0], num_heads))
