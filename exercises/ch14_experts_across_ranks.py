"""Chapter 14 (experts across ranks): expert parallelism's dispatch plan. Which rank each routed
token goes to, in which order the all-to-all sends them, and how the expert outputs that come back
are put back in place.

The rules of the chapter:
- the router picks k experts per token: topk_ids [tokens, k]; a (token, slot) *pair* is numbered
  p = token * k + slot (row-major order of topk_ids);
- expert e lives on rank expert_rank[e];
- all-to-all sends one contiguous block per destination rank, so the pairs are sent sorted by
  (destination rank, expert): rank 0's block first, and inside a block expert by expert in
  increasing id; pairs of the same expert keep their pair order;
- the rows that come back arrive in the order they were sent; `inverse` puts them back in pair
  order: returned[inverse] is in pair order.
"""

from __future__ import annotations

import torch


def dispatch_plan(
    topk_ids: torch.Tensor, expert_rank: torch.Tensor, num_ranks: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Task 14-experts-across-ranks/dispatch-plan: (send_order, inverse, rank_counts).

    topk_ids:    [tokens, k] int64, the experts the router picked for each token
    expert_rank: [num_experts] int64, the rank that holds each expert
    num_ranks:   how many ranks there are (a rank may hold no expert, or receive no pair)
    send_order:  [tokens * k] int64, the pair sent in position i (a permutation of 0 .. tokens*k - 1)
    inverse:     [tokens * k] int64, the position pair p is sent in: inverse[send_order[i]] == i
    rank_counts: [num_ranks] int64, how many pairs go to each rank (0 for a rank that gets none)

    topk_ids = [[2, 0], [1, 2]], expert_rank = [0, 0, 1], num_ranks = 2: pairs 0..3 go to experts
    2, 0, 1, 2 on ranks 1, 0, 0, 1 -> send_order [1, 2, 0, 3], inverse [2, 0, 1, 3], rank_counts [2, 2].

    Contract:
    - three int64 tensors of the shapes above, on topk_ids' device; topk_ids and expert_rank are
      left unchanged;
    - raise ValueError mentioning "topk_ids" when an id is outside 0 .. num_experts - 1, and one
      mentioning "expert_rank" when a rank is outside 0 .. num_ranks - 1.

    May use: torch. Not minisgl's dispatch_plan (minisgl/layers/moe_dispatch.py is this task).
    """
    raise NotImplementedError("14-experts-across-ranks/dispatch-plan")
