"""Chapter 00 reference: the warm-up all-reduce through the engine's collective seam."""

from __future__ import annotations

import torch

from minisgl.distributed import all_reduce, get_tp_info


def rank_sum(device: torch.device) -> int:
    mine = torch.tensor([get_tp_info().rank], dtype=torch.int64, device=device)  # [1]
    return int(all_reduce(mine).item())
