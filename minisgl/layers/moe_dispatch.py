"""Expert parallelism's bookkeeping: which rank each routed token goes to, in what order, and how
its expert outputs find their way back (chapter 14).

A token routed to k experts is k (token, slot) *pairs*, numbered `token * k + slot` (the row-major
order of the router's top-k ids [tokens, k]). A dispatch sends every pair to the rank that holds
its expert; all-to-all sends one contiguous block per destination rank, so the pairs go out sorted
by (destination rank, expert), ties kept in pair order. The same permutation, inverted, puts the
expert outputs that come back into pair order again.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class DispatchPlan:
    """send_order [pairs]: the pair sent in position i; inverse [pairs]: the position pair p is sent
    in (inverse[send_order[i]] == i); rank_counts [tp]: how many pairs go to each rank."""

    send_order: torch.Tensor
    inverse: torch.Tensor
    rank_counts: torch.Tensor


def dispatch_plan(topk_ids: torch.Tensor, expert_rank: torch.Tensor, num_ranks: int) -> DispatchPlan:
    """topk_ids [tokens, k] (int64 expert ids), expert_rank [num_experts] (the rank holding each
    expert), num_ranks -> the order to send the pairs in, its inverse, and the pairs per rank."""
    num_experts = expert_rank.numel()
    experts = topk_ids.reshape(-1)  # [pairs]
    # one key orders by destination rank first, then by expert inside it; a stable sort keeps pair order for ties
    key = expert_rank[experts] * num_experts + experts
    send_order = torch.sort(key, stable=True).indices
    inverse = torch.empty_like(send_order)
    inverse[send_order] = torch.arange(send_order.numel(), device=send_order.device)
    rank_counts = torch.bincount(expert_rank[experts], minlength=num_ranks)
    return DispatchPlan(send_order, inverse, rank_counts)
