"""Code that runs inside each rank for chapter 05: minisgl's vocab-parallel embedding and LM head
on real gloo ranks, with a recorder on the seam to catch what each rank sends."""

from __future__ import annotations

import sys
from pathlib import Path

import safetensors
import torch

from minisgl.layers import ParallelLMHead, VocabParallelEmbedding
from minisgl.models.config import ModelConfig
from minisgl.models.weight import shard_tensor

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from course import CollectiveRecorder  # noqa: E402


def vocab_parallel(rank: int, world_size: int, model_dir: Path, token_ids: torch.Tensor) -> dict:
    """Embed `token_ids` and compute logits of the embeddings with a tied LM head, at this rank."""
    config = ModelConfig.from_dir(model_dir)
    with safetensors.safe_open(str(model_dir / "model.safetensors"), framework="pt") as f:
        full = f.get_tensor("model.embed_tokens.weight")  # [vocab, hidden]
    embed = VocabParallelEmbedding(config.vocab_size, config.hidden_size)
    embed.set_weight("weight", shard_tensor("model.embed_tokens.weight", full, rank, world_size, config))
    lm_head = ParallelLMHead(config.vocab_size, config.hidden_size, tied_embedding=embed)

    recorder = CollectiveRecorder.install(keep_tensors=True)
    hidden = embed.forward(token_ids)  # [tokens, hidden], all-reduced
    logits = lm_head.forward(hidden)  # [tokens, vocab], all-gathered and trimmed
    partial, local_logits = recorder.calls[0].tensor, recorder.calls[1].tensor
    return {
        "vocab range": (embed.vocab_start, embed.vocab_end),
        "shard rows": embed.shard_size,
        "partial": partial,  # this rank's contribution to the all-reduce: [tokens, hidden]
        "hidden": hidden,
        "local logits": local_logits,  # [tokens, shard_size], padding columns included
        "logits": logits,
        "ops": [(c.op, c.caller, c.shape) for c in recorder.calls],
    }
