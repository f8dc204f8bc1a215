"""The capstone's plug (chapter 15): a learner's chapter 01, 04 and 05 functions as the engine's
tensor-parallel steps (`minisgl.models.tp_ops.TPOps`), handed to a real engine through `tp_ops=`.

It travels to every rank process with the engine's config (it pickles: it is only the impl spec),
and each call goes through the grader's adapters, so the engine's own code for a step stays off
limits while the learner's runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from . import adapters


@dataclass(frozen=True)
class LearnerTPOps:
    """The TP steps of `impl` (`exercises`, `solutions`, a package directory, as for --impl)."""

    impl: str

    def column_linear(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return adapters.column_parallel_forward(self.impl, x, weight, bias)

    def row_linear(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return adapters.row_parallel_forward(self.impl, x, weight, bias)

    def vocab_embedding(self, input_ids: torch.Tensor, weight: torch.Tensor, vocab_size: int) -> torch.Tensor:
        return adapters.vocab_parallel_embedding(self.impl, input_ids, weight, vocab_size)

    def lm_head(self, hidden_states: torch.Tensor, weight: torch.Tensor, vocab_size: int) -> torch.Tensor:
        return adapters.parallel_lm_head(self.impl, hidden_states, weight, vocab_size)

    def shard_and_merge(self, tensors: Iterable[tuple[str, torch.Tensor]], rank: int, tp_size: int,
                        config: Any) -> Iterator[tuple[str, torch.Tensor]]:
        return adapters.shard_and_merge(self.impl, tensors, rank, tp_size, config)


def unfinished(impl: str, config: Any) -> str | None:
    """The first function the capstone needs that still raises NotImplementedError, or None.

    Each is called once on tiny inputs at tp = 1 (this process), so a stub is reported as not
    attempted before any engine starts."""
    x, weight = torch.ones(1, 2), torch.ones(2, 2)
    probes = {
        "ch01 column_parallel_forward": lambda: adapters.column_parallel_forward(impl, x, weight, None),
        "ch01 row_parallel_forward": lambda: adapters.row_parallel_forward(impl, x, weight, None),
        "ch04 shard_and_merge": lambda: list(adapters.shard_and_merge(impl, iter([("model.norm.weight", x[0])]), 0, 1,
                                                                      config)),
        "ch05 vocab_parallel_embedding": lambda: adapters.vocab_parallel_embedding(impl, torch.tensor([1]), weight, 2),
        "ch05 parallel_lm_head": lambda: adapters.parallel_lm_head(impl, x, weight, 2),
    }
    for name, probe in probes.items():
        try:
            probe()
        except NotImplementedError:
            return name
        except Exception:  # noqa: BLE001 - attempted; the real run reports what is wrong
            pass
    return None
