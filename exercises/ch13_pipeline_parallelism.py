"""Chapter 13 (pipeline parallelism): which decoder layers each pipeline stage holds, and which
stages hold each checkpoint tensor.

The split rules of the chapter:
- pp_size stages hold contiguous blocks of layers, stage 0 the first block; every layer on exactly
  one stage, every stage at least one layer;
- the blocks differ in size by at most one: when pp_size does not divide num_layers, the first
  num_layers % pp_size stages hold one layer more (the last stage, which also runs the final norm
  and the LM head, never gets an extra one);
- the first stage holds the embedding; the last stage the final norm and the LM head; with tied
  embeddings the last stage holds the embedding table too (its LM head multiplies by it).
"""

from __future__ import annotations


def split_layers(num_layers: int, pp_size: int) -> list[tuple[int, int]]:
    """Task 13-pipeline-parallelism/stage-split: (first layer, one past the last layer) of each
    stage, stage 0 first.

    split_layers(5, 2) == [(0, 3), (3, 5)]
    split_layers(8, 3) == [(0, 3), (3, 6), (6, 8)]

    Contract:
    - a list of pp_size tuples of two plain ints;
    - raise ValueError when pp_size < 1, or when pp_size > num_layers (a stage without layers); the
      message names pp_size.

    May use: plain Python. Nothing of minisgl (minisgl/models/stage.py is this task).
    """
    raise NotImplementedError("13-pipeline-parallelism/stage-split")


def stages_holding(name: str, num_layers: int, pp_size: int, tie_word_embeddings: bool) -> list[int]:
    """Task 13-pipeline-parallelism/stage-weights: the stages that load checkpoint tensor `name`,
    in increasing order, with the chapter's split of `num_layers` layers over `pp_size` stages.

    Names are Hugging Face Llama names: `model.embed_tokens.weight`, `model.layers.<i>.<anything>`,
    `model.norm.weight`, `lm_head.weight`.

    stages_holding("model.layers.3.mlp.up_proj.weight", 5, 2, False) == [1]
    stages_holding("model.embed_tokens.weight", 5, 2, True) == [0, 1]

    Contract:
    - a list of plain ints without repeats (one stage holding the table twice is still one stage);
    - raise ValueError for a layer index outside 0 .. num_layers - 1 (naming the layer), for any
      other name (naming it), and for the split's own errors.

    May use: plain Python, and your split_layers. Nothing of minisgl.
    """
    raise NotImplementedError("13-pipeline-parallelism/stage-weights")
