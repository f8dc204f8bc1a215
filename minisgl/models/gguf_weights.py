"""A llama.cpp GGUF file read as Hugging Face-named tensors, one at a time (chapters 00 and 16).

Converting the embedded model dequantizes every tensor to float32. With `--quantization gguf` the
CPU plug-in reads the GGUF next to the converted checkpoint through the same walk, keeping its 4-bit
weights 4-bit (`read`, minisgl/cpu/gguf.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from gguf import GGUFReader, ReaderTensor
from gguf.quants import dequantize

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
def find_model_gguf(model_dir: Path) -> Path | None:
    """The one `*.gguf` file in a checkpoint directory, or None when it has none."""
    files = sorted(path for path in model_dir.glob("*.gguf") if path.is_file())  # skips dangling links
    if len(files) > 1:
        raise ModelError(f"'{model_dir}' holds several GGUF files ({', '.join(f.name for f in files)}); keep one")
    return files[0] if files else None


def iter_gguf_tensors(
    reader: GGUFReader, num_heads: int, num_kv_heads: int, keep: Callable[[str], bool] | None = None,
    read: Callable[[str, ReaderTensor], Any] | None = None,
) -> Iterator[tuple[str, Any]]:
    """(Hugging Face name, tensor) for every tensor of the file (that `keep` accepts: a pipeline
    stage's), in file order, dequantized to float32; `read(name, gguf_tensor)` may give another form
    of a tensor instead (anything whose rows `index_select` can reorder, for the q/k row order)."""
    for gguf_tensor in reader.tensors:
        name = hf_tensor_name(gguf_tensor.name)
        if keep is not None and not keep(name):
            continue
        weight = dequantize_tensor(gguf_tensor) if read is None else read(name, gguf_tensor)
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


def undo_llama_cpp_rope_permutation(weight: Any, num_heads: int) -> Any:
    """Put the rows of a q_proj/k_proj weight back in Hugging Face order (rows move whole, with
    their quantization scales). For k_proj, num_heads is the number of KV heads."""
    return weight.index_select(0, rope_row_order(weight.shape[0], num_heads))
