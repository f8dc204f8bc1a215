"""Chapter 00 (getting started): a warm-up that runs on several real ranks at once.

Run `pytest exercises -m ch00` to grade this file. The grader starts 2 and 4 processes, joins them
in one torch.distributed group (gloo on CPU), calls `set_tp_info(rank, size)` in each, and then
calls your function on every rank at the same time.
"""

from __future__ import annotations

import torch


def rank_sum(device: torch.device) -> int:
    """Task 00-getting-started/rank-sum: the sum of all ranks' numbers, returned on every rank.

    Every rank contributes its own rank number (from `minisgl.distributed.get_tp_info()`), e.g. at
    tp = 4 the answer is 0 + 1 + 2 + 3 = 6 on all four ranks. Build a tensor of shape [1] on
    `device` and sum it across ranks with `minisgl.distributed.all_reduce` (the one seam every
    collective goes through, so the grader can count it: exactly one call).
    """
    raise NotImplementedError("00-getting-started/rank-sum")
