"""Chapter 12 reference: the node layout and the DP dispatch policies, from the chapter's rules."""

from __future__ import annotations

POLICIES = ("round-robin", "least-load")


def node_layout(
    tp_size: int, nnodes: int, node_rank: int, dp_size: int = 1, gpus_per_node: int = 1
) -> list[tuple[int, int, int]]:
    for name, value in (("tp_size", tp_size), ("nnodes", nnodes), ("dp_size", dp_size),
                        ("gpus_per_node", gpus_per_node)):
        if value < 1:
            raise ValueError(f"{name} must be at least 1, got {value}")
    if tp_size % nnodes != 0:
        raise ValueError(f"nnodes={nnodes} does not divide tp_size={tp_size}")
    if not 0 <= node_rank < nnodes:
        raise ValueError(f"node_rank must be in 0..{nnodes - 1}, got {node_rank}")
    if dp_size > 1 and nnodes > 1:
        raise ValueError(f"dp_size={dp_size} runs its replicas on one machine, but nnodes={nnodes}")
    per_node = tp_size // nnodes
    ranks = range(node_rank * per_node, (node_rank + 1) * per_node)  # this node's contiguous block
    processes = [(replica, rank) for replica in range(dp_size) for rank in ranks]  # replica after replica
    return [(replica, rank, local % gpus_per_node) for local, (replica, rank) in enumerate(processes)]


def pick_replica(policy: str, loads: list[int], num_sent: int) -> int:
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; use one of {', '.join(POLICIES)}")
    if not loads:
        raise ValueError("loads is empty: there are no replicas to pick from")
    if policy == "round-robin":
        return num_sent % len(loads)
    smallest = min(loads)
    return next(i for i, load in enumerate(loads) if load == smallest)  # the first of equals
