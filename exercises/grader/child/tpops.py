"""The capstone's plug (chapter 15): the learner's chapter 01, 04 and 05 functions as the
engine's tensor-parallel steps (`minisgl.models.tp_ops.TPOps`), handed to a real engine through `tp_ops=`.

It pickles to every engine rank as the name of a package (the learner's files are on each rank's
path). In the grader it runs inside the sandbox, on the staged package `exercises`, and the minisgl
the ranks import is the grader's capstone copy, where the engine's own code for these five steps
raises OffLimits. Chapter 15's notebook uses it as `exercises.grader.capstone.LearnerTPOps`.

The grader's job also hands it `calls`, counters in shared memory that every engine rank adds to,
one per step: the tokens are accepted only if the engine called each of the learner's steps.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from . import learner

CH01, CH04, CH05 = "ch01_tp_first_principles", "ch04_weight_sharding", "ch05_vocab_parallelism"
STEPS = ("column_linear", "row_linear", "vocab_embedding", "lm_head", "shard_and_merge")


@dataclass(frozen=True)
class LearnerTPOps:
    """The TP steps of the learner's package (`exercises`: in the sandbox, the staged files)."""

    package: str = learner.PACKAGE
    calls: Any = field(default=None, compare=False, repr=False)  # a shared ctypes array of len(STEPS) ints, or None

    def _count(self, step: str) -> None:
        if self.calls is not None:
            self.calls[STEPS.index(step)] += 1

    def column_linear(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        self._count("column_linear")
        return learner.function(CH01, "column_parallel_forward", self.package)(x, weight, bias)

    def row_linear(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        self._count("row_linear")
        return learner.function(CH01, "row_parallel_forward", self.package)(x, weight, bias)

    def vocab_embedding(self, input_ids: torch.Tensor, weight: torch.Tensor, vocab_size: int) -> torch.Tensor:
        self._count("vocab_embedding")
        return learner.function(CH05, "vocab_parallel_embedding", self.package)(input_ids, weight, vocab_size)

    def lm_head(self, hidden_states: torch.Tensor, weight: torch.Tensor, vocab_size: int) -> torch.Tensor:
        self._count("lm_head")
        return learner.function(CH05, "parallel_lm_head", self.package)(hidden_states, weight, vocab_size)

    def shard_and_merge(self, tensors: Iterable[tuple[str, torch.Tensor]], rank: int, tp_size: int,
                        config: Any) -> Iterator[tuple[str, torch.Tensor]]:
        self._count("shard_and_merge")
        return learner.function(CH04, "shard_and_merge", self.package)(tensors, rank, tp_size, config)


def unfinished(package: str, config: Any) -> str | None:
    """The first function the capstone needs that still raises NotImplementedError, or None.

    Each is called once on tiny inputs at tp = 1 (this process), so a stub is reported as not
    attempted before any engine starts."""
    ops = LearnerTPOps(package)
    x, weight = torch.ones(1, 2), torch.ones(2, 2)
    probes = {
        "ch01 column_parallel_forward": lambda: ops.column_linear(x, weight, None),
        "ch01 row_parallel_forward": lambda: ops.row_linear(x, weight, None),
        "ch04 shard_and_merge": lambda: list(ops.shard_and_merge(iter([("model.norm.weight", x[0])]), 0, 1, config)),
        "ch05 vocab_parallel_embedding": lambda: ops.vocab_embedding(torch.tensor([1]), weight, 2),
        "ch05 parallel_lm_head": lambda: ops.lm_head(x, weight, 2),
    }
    for name, probe in probes.items():
        try:
            probe()
        except NotImplementedError:
            return name
        except Exception:  # noqa: BLE001 - attempted; the real run reports what is wrong
            pass
    return None
