"""Chapter 09 reference. The engine counts collectives at run time (minisgl.distributed's
collective_counts); it has no calculator, so these few formulas live here."""

from __future__ import annotations

from typing import Any


def all_reduces_per_forward(hf_config: dict[str, Any]) -> int:
    return 2 * hf_config["num_hidden_layers"] + 1  # o_proj + down_proj per layer, + the embedding


def all_reduce_bytes_per_token(hf_config: dict[str, Any], dtype_bytes: int = 2) -> int:
    return hf_config["hidden_size"] * dtype_bytes  # one hidden vector


def _check_tp(tp_size: int) -> None:
    if tp_size < 1:
        raise ValueError(f"tp_size must be at least 1, got {tp_size}")


def ring_factor(tp_size: int) -> float:
    _check_tp(tp_size)
    return 2 * (tp_size - 1) / tp_size  # reduce-scatter + all-gather, (t - 1) / t each


def sent_bytes_per_rank_per_token(hf_config: dict[str, Any], tp_size: int, dtype_bytes: int = 2) -> float:
    payload = all_reduces_per_forward(hf_config) * all_reduce_bytes_per_token(hf_config, dtype_bytes)
    return payload * ring_factor(tp_size)


def logits_gather_bytes_per_rank(hf_config: dict[str, Any], tp_size: int, dtype_bytes: int = 2) -> float:
    _check_tp(tp_size)
    return hf_config["vocab_size"] * dtype_bytes * (tp_size - 1) / tp_size  # the shards it lacks
