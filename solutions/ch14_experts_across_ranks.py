"""Chapter 14 reference: expert parallelism's dispatch plan, from the chapter's rules."""

from __future__ import annotations

import torch


def dispatch_plan(
    topk_ids: torch.Tensor, expert_rank: torch.Tensor, num_ranks: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    num_experts = expert_rank.numel()
    experts = topk_ids.reshape(-1)  # [pairs]: pair p = token * k + slot
    if experts.numel() and (int(experts.min()) < 0 or int(experts.max()) >= num_experts):
        raise ValueError(f"topk_ids must be expert ids in 0..{num_experts - 1}, got {experts.tolist()}")
    if expert_rank.numel() and (int(expert_rank.min()) < 0 or int(expert_rank.max()) >= num_ranks):
        raise ValueError(f"expert_rank must name ranks in 0..{num_ranks - 1}, got {expert_rank.tolist()}")
    ranks = expert_rank[experts]  # [pairs]: where each pair goes
    key = ranks * num_experts + experts  # by rank, then by expert inside the rank
    send_order = torch.sort(key, stable=True).indices  # stable: ties keep pair order
    inverse = torch.empty_like(send_order)
    inverse[send_order] = torch.arange(send_order.numel(), device=send_order.device)
    rank_counts = torch.bincount(ranks, minlength=num_ranks)
    return send_order, inverse, rank_counts
