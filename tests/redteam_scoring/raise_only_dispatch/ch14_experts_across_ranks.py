"""Cheat: no plan - only the error, naming every word the error tests look for."""


def dispatch_plan(topk_ids, expert_rank, num_ranks):
    raise ValueError("topk_ids expert_rank")
