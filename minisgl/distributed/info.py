"""`DistributedInfo`: this process's tensor-parallel rank and the group size.

It is set once per process, before any layer is built, because every TP layer reads it in its
constructor to decide how large its local shard is (chapter 02).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DistributedInfo:
    """Rank `rank` of a tensor-parallel group of `size` processes."""

    rank: int
    size: int

    def __post_init__(self) -> None:
        if self.size < 1 or not 0 <= self.rank < self.size:
            raise ValueError(f"invalid DistributedInfo(rank={self.rank}, size={self.size})")

    @property
    def is_primary(self) -> bool:
        """Rank 0 is the only rank that talks to the tokenizer and detokenizer."""
        return self.rank == 0


_TP_INFO: DistributedInfo | None = None


def set_tp_info(rank: int, size: int) -> DistributedInfo:
    """Record this process's TP position. Call it before constructing any layer."""
    global _TP_INFO
    _TP_INFO = DistributedInfo(rank, size)
    return _TP_INFO


def get_tp_info() -> DistributedInfo:
    """This process's TP position; a single-process default of (0, 1) if none was set."""
    return _TP_INFO if _TP_INFO is not None else DistributedInfo(0, 1)
