"""`ModelConfig`: the few numbers of a Hugging Face `config.json` the engine needs, and the rule
for which tensor-parallel sizes a model allows (chapter 04)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class ModelError(ValueError):
    """A model directory or config the engine cannot use; the message says what to do."""


@dataclass(frozen=True)
class ModelConfig:
    architecture: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    rms_norm_eps: float
    rope_theta: float
    max_position_embeddings: int
    tie_word_embeddings: bool
    qkv_bias: bool = False
    o_bias: bool = False
    qk_norm: bool = False
    rope_scaling: dict[str, Any] | None = None
    eos_token_ids: tuple[int, ...] = ()

    @classmethod
    def from_dir(cls, model_dir: str | Path) -> ModelConfig:
        model_dir = Path(model_dir)
        if not model_dir.is_dir():
            raise ModelError(
                f"model directory '{model_dir}' does not exist; pass a Hugging Face checkpoint "
                "directory, or leave the model unset to use the embedded SmolLM2"
            )
        config_path = model_dir / "config.json"
        if not config_path.is_file():
            raise ModelError(f"'{model_dir}' has no config.json; it is not a Hugging Face checkpoint directory")
        raw = json.loads(config_path.read_text())
        generation_path = model_dir / "generation_config.json"
        generation = json.loads(generation_path.read_text()) if generation_path.is_file() else {}
        return cls.from_dict(raw, generation)

    @classmethod
    def from_dict(cls, raw: dict[str, Any], generation: dict[str, Any] | None = None) -> ModelConfig:
        from .registry import check_architecture

        architecture = check_architecture(raw)
        num_heads = raw["num_attention_heads"]
        rope = raw.get("rope_parameters") or {}
        rope_scaling = raw.get("rope_scaling") or (rope if rope.get("rope_type", "default") != "default" else None)
        is_qwen2 = architecture == "Qwen2ForCausalLM"
        return cls(
            architecture=architecture,
            hidden_size=raw["hidden_size"],
            num_layers=raw["num_hidden_layers"],
            num_heads=num_heads,
            num_kv_heads=raw.get("num_key_value_heads") or num_heads,
            head_dim=raw.get("head_dim") or raw["hidden_size"] // num_heads,
            intermediate_size=raw["intermediate_size"],
            vocab_size=raw["vocab_size"],
            rms_norm_eps=raw.get("rms_norm_eps", 1e-6),
            rope_theta=raw.get("rope_theta") or rope.get("rope_theta", 10000.0),
            max_position_embeddings=raw.get("max_position_embeddings", 2048),
            tie_word_embeddings=raw.get("tie_word_embeddings", False),
            qkv_bias=is_qwen2 or raw.get("attention_bias", False),
            o_bias=raw.get("attention_bias", False),
            qk_norm=architecture == "Qwen3ForCausalLM",
            rope_scaling=rope_scaling,
            eos_token_ids=_eos_ids(raw, generation or {}),
        )

    def valid_tp_sizes(self) -> list[int]:
        """Sizes that split the query heads and the MLP evenly, and whose KV heads split or replicate."""
        return [
            tp
            for tp in range(1, self.num_heads + 1)
            if self.num_heads % tp == 0
            and self.intermediate_size % tp == 0
            and (self.num_kv_heads % tp == 0 or tp % self.num_kv_heads == 0)
        ]

    def check_tp_size(self, tp_size: int) -> None:
        valid = self.valid_tp_sizes()
        if tp_size in valid:
            return
        if self.num_heads % tp_size != 0:
            reason = f"does not divide num_attention_heads={self.num_heads}"
        elif self.intermediate_size % tp_size != 0:
            reason = f"does not divide intermediate_size={self.intermediate_size}"
        else:
            reason = f"neither divides nor is a multiple of num_key_value_heads={self.num_kv_heads}"
        raise ModelError(f"tp_size={tp_size} {reason}; valid tp sizes: {', '.join(map(str, valid))}")


def _eos_ids(raw: dict[str, Any], generation: dict[str, Any]) -> tuple[int, ...]:
    ids: list[int] = []
    for source in (generation.get("eos_token_id"), raw.get("eos_token_id")):
        for token in source if isinstance(source, list) else [source]:
            if token is not None and token not in ids:
                ids.append(token)
    return tuple(ids)
