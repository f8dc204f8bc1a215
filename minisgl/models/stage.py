"""Pipeline stages (chapter 13): which decoder layers, and which of the embedding, final norm and
LM head, one stage of a `pp_size`-stage pipeline holds.

Layers are split into contiguous blocks as evenly as possible; when `pp_size` does not divide the
layer count, the first `num_layers % pp_size` stages take one layer more. The last stage never gets
an extra layer: it already runs the final norm and the LM head, the largest matmul of a decode step.
The first stage holds the embedding; with tied embeddings the last stage holds the embedding table
too, as its LM head's weight.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from minisgl.layers import BaseOP

_LAYER_NAME = re.compile(r"^model\.layers\.(\d+)\.")


def split_layers(num_layers: int, pp_size: int) -> list[range]:
    """The global layer indices of each stage, stage 0 first: contiguous, in order, covering every
    layer once; sizes differ by at most one, the larger ones first."""
    if pp_size < 1:
        raise ValueError(f"pp_size must be at least 1, got {pp_size}")
    if pp_size > num_layers:
        raise ValueError(f"pp_size={pp_size} exceeds num_hidden_layers={num_layers}: every stage needs a layer; "
                         f"use pp_size <= {num_layers}")
    base, extra = divmod(num_layers, pp_size)
    stages, start = [], 0
    for stage in range(pp_size):
        size = base + (1 if stage < extra else 0)
        stages.append(range(start, start + size))
        start += size
    return stages


@dataclass(frozen=True)
class PipelineStage:
    """Stage `rank` of `size`, holding decoder layers `layers` (global indices) of a model."""

    rank: int
    size: int
    layers: range
    tie_word_embeddings: bool = False

    @classmethod
    def of(cls, rank: int, size: int, num_layers: int, tie_word_embeddings: bool = False) -> PipelineStage:
        return cls(rank, size, split_layers(num_layers, size)[rank], tie_word_embeddings)

    @property
    def is_first(self) -> bool:
        return self.rank == 0

    @property
    def is_last(self) -> bool:
        return self.rank == self.size - 1

    @property
    def holds_embedding(self) -> bool:
        """The first stage looks tokens up; with tied embeddings the last one multiplies by the table."""
        return self.is_first or (self.is_last and self.tie_word_embeddings)

    def kv_layer(self, layer: int) -> int:
        """Where global layer `layer` keeps its K/V in this stage's pool, which holds only its layers."""
        return layer - self.layers.start

    def holds(self, name: str) -> bool:
        """Whether checkpoint tensor `name` (e.g. `model.layers.3.mlp.up_proj.weight`) lives here."""
        match = _LAYER_NAME.match(name)
        if match:
            return int(match.group(1)) in self.layers
        if name.startswith("model.embed_tokens."):
            return self.holds_embedding
        if name.startswith(("model.norm.", "lm_head.")):
            return self.is_last
        return True  # anything else (e.g. rotary buffers the loader skips anyway)


class MissingLayer(BaseOP):
    """A slot for a layer that another stage holds: no weights, never run. It keeps the global layer
    indices in the state-dict names (`layers.7.…` stays `layers.7.…`)."""


def whole_model(num_layers: int, tie_word_embeddings: bool = False) -> PipelineStage:
    """The one stage of a run without pipeline parallelism."""
    return PipelineStage(0, 1, range(num_layers), tie_word_embeddings)
