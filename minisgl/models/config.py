"""`ModelConfig`: the few numbers of a Hugging Face `config.json` the engine needs, and the rule
for which tensor-parallel sizes a model allows (chapter 04); for a mixture-of-experts model, also
which layers route to experts and how the experts split across the ranks (chapter 14)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MOE_PARALLEL = ("tp", "ep")  # split each expert's intermediate dim, or place whole experts per rank


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
    # mixture of experts (Qwen3-MoE; 0 experts: every layer has the dense MLP)
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    norm_topk_prob: bool = False
    decoder_sparse_step: int = 1
    mlp_only_layers: tuple[int, ...] = ()
    moe_parallel: str = "tp"  # the engine's choice, not config.json's: "tp" or "ep" (MOE_PARALLEL)

    @classmethod
    def from_dir(cls, model_dir: str | Path) -> ModelConfig:
        model_dir = Path(model_dir)
        if not model_dir.is_dir():
            raise ModelError(f"model directory '{model_dir}' does not exist; pass a Hugging Face checkpoint "
                             "directory, or leave the model unset to use the embedded SmolLM2")
        if not (model_dir / "config.json").is_file():
            raise ModelError(f"'{model_dir}' has no config.json; it is not a Hugging Face checkpoint directory")
        generation = model_dir / "generation_config.json"
        return cls.from_dict(json.loads((model_dir / "config.json").read_text()),
                             json.loads(generation.read_text()) if generation.is_file() else {})

    @classmethod
    def from_dict(cls, raw: dict[str, Any], generation: dict[str, Any] | None = None) -> ModelConfig:
        from .registry import check_architecture

        architecture = check_architecture(raw)
        num_heads, hidden_size = raw["num_attention_heads"], raw["hidden_size"]
        rope = raw.get("rope_parameters") or {}
        rope_scaling = raw.get("rope_scaling") or (rope if rope.get("rope_type", "default") != "default" else None)
        moe = raw if architecture == "Qwen3MoeForCausalLM" else {}  # other models' expert fields stay 0
        return cls(
            architecture=architecture, hidden_size=hidden_size, num_layers=raw["num_hidden_layers"],
            num_heads=num_heads, num_kv_heads=raw.get("num_key_value_heads") or num_heads,
            head_dim=raw.get("head_dim") or hidden_size // num_heads, intermediate_size=raw["intermediate_size"],
            vocab_size=raw["vocab_size"], rms_norm_eps=raw.get("rms_norm_eps", 1e-6),
            rope_theta=raw.get("rope_theta") or rope.get("rope_theta", 10000.0), rope_scaling=rope_scaling,
            max_position_embeddings=raw.get("max_position_embeddings", 2048),
            tie_word_embeddings=raw.get("tie_word_embeddings", False),
            qkv_bias=architecture == "Qwen2ForCausalLM" or raw.get("attention_bias", False),
            o_bias=raw.get("attention_bias", False),
            qk_norm=architecture in ("Qwen3ForCausalLM", "Qwen3MoeForCausalLM"),
            eos_token_ids=_eos_ids(raw, generation or {}),
            # transformers 5 writes num_local_experts, Qwen's own checkpoints num_experts
            num_experts=moe.get("num_experts") or moe.get("num_local_experts") or 0,
            num_experts_per_tok=moe.get("num_experts_per_tok", 0),
            moe_intermediate_size=moe.get("moe_intermediate_size", 0),
            norm_topk_prob=raw.get("norm_topk_prob", False), decoder_sparse_step=raw.get("decoder_sparse_step") or 1,
            mlp_only_layers=tuple(raw.get("mlp_only_layers") or ()),
        )

    def is_moe_layer(self, layer_id: int) -> bool:
        """Whether layer `layer_id` routes to experts (Qwen3-MoE's rule), else it has the dense MLP."""
        sparse = layer_id not in self.mlp_only_layers and (layer_id + 1) % self.decoder_sparse_step == 0
        return self.num_experts > 0 and sparse

    def with_moe_parallel(self, mode: str) -> ModelConfig:
        """This config with its experts split by `mode`: "tp" (each one's intermediate dim) or "ep" (whole ones)."""
        if mode not in MOE_PARALLEL:
            raise ModelError(f"moe_parallel={mode!r} is not a way to split experts; choose {' or '.join(MOE_PARALLEL)}")
        if mode == "ep" and self.num_experts == 0:
            raise ModelError(f"moe_parallel='ep' needs a mixture-of-experts model; {self.architecture} has no experts")
        return dataclasses.replace(self, moe_parallel=mode)

    def split_dims(self) -> dict[str, int]:
        """The sizes every tp size must divide: query heads, the dense MLP (if a layer has one), and
        the experts' intermediate dim (moe_parallel "tp") or the number of experts ("ep")."""
        dims = {"num_attention_heads": self.num_heads}
        if not all(self.is_moe_layer(i) for i in range(self.num_layers)):
            dims["intermediate_size"] = self.intermediate_size
        if self.num_experts > 0 and self.moe_parallel == "tp":
            dims["moe_intermediate_size"] = self.moe_intermediate_size
        if self.num_experts > 0 and self.moe_parallel == "ep":
            dims["num_experts"] = self.num_experts
        return dims

    def valid_tp_sizes(self) -> list[int]:
        """Sizes that split the query heads, MLP and experts evenly, and whose KV heads split or replicate."""
        return [tp for tp in range(1, self.num_heads + 1) if all(size % tp == 0 for size in self.split_dims().values())
                and (self.num_kv_heads % tp == 0 or tp % self.num_kv_heads == 0)]

    def check_tp_size(self, tp_size: int) -> None:
        """Raise the one-line error naming what `tp_size` does not split, and the valid sizes."""
        if tp_size in (valid := self.valid_tp_sizes()):
            return
        undivided = [f"{name}={size}" for name, size in self.split_dims().items() if size % tp_size != 0]
        reason = (f"does not divide {undivided[0]}" if undivided
                  else f"neither divides nor is a multiple of num_key_value_heads={self.num_kv_heads}")
        split = f" (moe_parallel={self.moe_parallel})" if self.num_experts > 0 else ""
        raise ModelError(f"tp_size={tp_size} {reason}{split}; valid tp sizes: {', '.join(map(str, valid))}")


def _eos_ids(raw: dict[str, Any], generation: dict[str, Any]) -> tuple[int, ...]:
    """generation_config.json's end-of-sequence ids, then config.json's, each once."""
    sources = [generation.get("eos_token_id"), raw.get("eos_token_id")]
    ids = [token for source in sources for token in (source if isinstance(source, list) else [source])]
    return tuple(dict.fromkeys(token for token in ids if token is not None))
