"""Chapter 13 reference: the stage split of the layers and which stages load each tensor, from the
chapter's rules."""

from __future__ import annotations

import re

LAYER = re.compile(r"model\.layers\.(\d+)\.")


def split_layers(num_layers: int, pp_size: int) -> list[tuple[int, int]]:
    if pp_size < 1:
        raise ValueError(f"pp_size must be at least 1, got {pp_size}")
    if pp_size > num_layers:
        raise ValueError(f"pp_size={pp_size} leaves a stage without layers: there are {num_layers}")
    base, extra = divmod(num_layers, pp_size)
    blocks, start = [], 0
    for stage in range(pp_size):
        size = base + 1 if stage < extra else base  # the first `extra` stages take one more
        blocks.append((start, start + size))
        start += size
    return blocks


def stages_holding(name: str, num_layers: int, pp_size: int, tie_word_embeddings: bool) -> list[int]:
    blocks = split_layers(num_layers, pp_size)
    last = pp_size - 1
    match = LAYER.match(name)
    if match:
        layer = int(match.group(1))
        if not 0 <= layer < num_layers:
            raise ValueError(f"layer {layer} is outside 0..{num_layers - 1}")
        return [next(stage for stage, (start, end) in enumerate(blocks) if start <= layer < end)]
    if name == "model.embed_tokens.weight":
        return sorted({0, last}) if tie_word_embeddings else [0]
    if name in ("model.norm.weight", "lm_head.weight"):
        return [last]
    raise ValueError(f"{name!r} is not a Llama checkpoint tensor")
