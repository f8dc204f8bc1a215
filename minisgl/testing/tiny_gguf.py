"""Tiny GGUF checkpoints for the quantization tests: a tiny random Llama whose projection weights are
block-quantized (Q4_0, Q4_1 or Q8_0, the embedding Q8_0) into `model.gguf`, next to a safetensors
copy of the very same weights dequantized, as the embedded SmolLM2 is converted (chapter 16).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from gguf import GGMLQuantizationType, GGUFWriter
from gguf.quants import dequantize, quantize

from minisgl.models.default_model import building_checkpoint, is_complete_checkpoint
from minisgl.models.gguf_weights import GLOBAL_TENSOR_NAMES, LAYER_TENSOR_NAMES, find_model_gguf, rope_row_order

from .tiny_models import TINY_MODEL_SPECS, build_random_model, build_tokenizer

# Hugging Face name (without the layer prefix) -> GGUF name: the loader's table, read backwards
HF_TO_GGUF = {hf: gguf for gguf, hf in {**LAYER_TENSOR_NAMES, **GLOBAL_TENSOR_NAMES}.items()}


def make_tiny_gguf_model(
    name: str, out_dir: Path, qtype: GGMLQuantizationType = GGMLQuantizationType.Q4_1, seed: int = 0
) -> Path:
    """Build (or reuse) tiny model `name` with its projections stored as `qtype` in a GGUF file."""
    target = Path(out_dir)
    if is_complete_checkpoint(target) and find_model_gguf(target) is not None:
        return target
    config = TINY_MODEL_SPECS[name].config
    model = build_random_model(config, seed)
    with building_checkpoint(target) as scratch:
        writer = GGUFWriter(scratch / "model.gguf", "llama")
        with torch.no_grad():
            for hf_name, param in model.named_parameters():  # a tied LM head is listed once
                tensor_type = _tensor_type(hf_name, qtype)
                heads = _rope_heads(hf_name, config)
                order = rope_row_order(param.shape[0], heads) if heads else torch.arange(param.shape[0])
                # llama.cpp's converter stores q/k rows in its rotary order; the loader undoes it
                stored = quantize(param.numpy()[torch.argsort(order).numpy()], tensor_type)
                writer.add_tensor(_gguf_name(hf_name), stored, raw_dtype=tensor_type)
                restored = dequantize(stored, tensor_type).reshape(param.shape)[order.numpy()]
                param.copy_(torch.from_numpy(np.ascontiguousarray(restored)))  # what the GGUF holds
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        model.save_pretrained(scratch)
        build_tokenizer(config.vocab_size).save_pretrained(scratch, save_jinja_files=False)
    return target


def _tensor_type(hf_name: str, qtype: GGMLQuantizationType) -> GGMLQuantizationType:
    if hf_name.endswith("_proj.weight"):
        return qtype
    if hf_name.endswith(("embed_tokens.weight", "lm_head.weight")):
        return GGMLQuantizationType.Q8_0  # as in SmolLM2's GGUF
    return GGMLQuantizationType.F32


def _rope_heads(hf_name: str, config) -> int:
    if hf_name.endswith("q_proj.weight"):
        return config.num_attention_heads
    if hf_name.endswith("k_proj.weight"):
        return config.num_key_value_heads
    return 0


def _gguf_name(hf_name: str) -> str:
    if hf_name in HF_TO_GGUF:
        return HF_TO_GGUF[hf_name]
    _, _, layer, local = hf_name.split(".", 3)  # model.layers.3.self_attn.q_proj.weight
    return f"blk.{layer}.{HF_TO_GGUF[local]}"

