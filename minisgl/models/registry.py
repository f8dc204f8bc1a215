"""Which model class serves a checkpoint, chosen by `architectures[0]` of its config.json
(chapter 04)."""

from __future__ import annotations

from typing import Any

from minisgl.layers import BaseOP

from .llama import LlamaForCausalLM
from .stage import PipelineStage

# Qwen2 (qkv bias), Qwen3 (q/k norm), Qwen3-MoE (Qwen3 with experts in some or all layers) and
# Mistral are Llama with config flags; see ModelConfig.
MODEL_REGISTRY: dict[str, type[BaseOP]] = {
    "LlamaForCausalLM": LlamaForCausalLM,
    "Qwen2ForCausalLM": LlamaForCausalLM,
    "Qwen3ForCausalLM": LlamaForCausalLM,
    "Qwen3MoeForCausalLM": LlamaForCausalLM,
    "MistralForCausalLM": LlamaForCausalLM,
}


def check_architecture(raw_config: dict[str, Any]) -> str:
    """The config's architecture name, or a one-line error listing the supported ones."""
    from .config import ModelError

    architectures = raw_config.get("architectures") or []
    name = architectures[0] if architectures else "<none>"
    if name not in MODEL_REGISTRY:
        raise ModelError(
            f"architecture '{name}' is not supported; supported: {', '.join(MODEL_REGISTRY)}"
        )
    if raw_config.get("mlp_bias"):
        raise ModelError(f"'{name}' with mlp_bias=true is not supported")
    if raw_config.get("sliding_window") and raw_config.get("use_sliding_window", True):
        window = raw_config["sliding_window"]
        if window < raw_config.get("max_position_embeddings", 0):
            raise ModelError(f"sliding-window attention (window {window}) is not supported")
    return name


def create_model(config: Any, stage: PipelineStage | None = None) -> BaseOP:
    """Build the model's layers (call under `torch.device("meta")` to allocate nothing); with a
    pipeline `stage`, only those this stage holds (chapter 13)."""
    cls = MODEL_REGISTRY[config.architecture]
    return cls(config) if stage is None or stage.size == 1 else cls(config, stage)
