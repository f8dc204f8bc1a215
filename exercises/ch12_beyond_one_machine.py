"""Chapter 12 (beyond one machine): which scheduler processes a node starts and on which GPU, and
which data-parallel replica gets each request.

The layout rules of the chapter:
- a TP group of tp_size ranks over nnodes machines: node n runs the k = tp_size / nnodes ranks
  n * k .. n * k + k - 1, one contiguous block per node;
- dp_size replicas of the group run on one machine (dp_size > 1 needs nnodes == 1);
- a node starts replica 0's ranks, then replica 1's, and so on, each replica's ranks in increasing
  order; a process's local index is its place in that order (0, 1, ...), and it runs on GPU
  local_index % gpus_per_node (with fewer GPUs than processes, they share).
"""

from __future__ import annotations


def node_layout(
    tp_size: int, nnodes: int, node_rank: int, dp_size: int = 1, gpus_per_node: int = 1
) -> list[tuple[int, int, int]]:
    """Task 12-beyond-one-machine/node-layout: (replica, tp rank, GPU) of every scheduler process
    node `node_rank` starts, in start order.

    node_layout(4, 2, 1, gpus_per_node=2) == [(0, 2, 0), (0, 3, 1)]
    node_layout(2, 1, 0, dp_size=2, gpus_per_node=4) == [(0, 0, 0), (0, 1, 1), (1, 0, 2), (1, 1, 3)]

    Contract:
    - a list of tuples of three plain ints;
    - raise ValueError when tp_size, nnodes, dp_size or gpus_per_node is below 1, when nnodes does
      not divide tp_size, when node_rank is not in 0 .. nnodes - 1, or when dp_size > 1 while
      nnodes > 1; the message names the argument at fault (e.g. "nnodes").

    May use: plain Python. Nothing of minisgl (spawn_ranks, node_ranks and EngineConfig.local_rank
    compute exactly this).
    """
    raise NotImplementedError("12-beyond-one-machine/node-layout")


def pick_replica(policy: str, loads: list[int], num_sent: int) -> int:
    """Task 12-beyond-one-machine/dp-dispatch: the replica the DP controller sends the next request to.

    policy:   "round-robin" or "least-load"
    loads:    loads[i] is replica i's unfinished requests (waiting + running), one entry per replica
    num_sent: how many requests the controller sent before this one (0 for the first)
    returns   round-robin: num_sent % len(loads), whatever the loads;
              least-load: the index of the smallest load, the lowest such index on a tie

    Contract:
    - a plain int; `loads` is left unchanged (the controller updates it itself);
    - raise ValueError naming the policy for an unknown one (names are exact: "Round-Robin" is
      unknown), and ValueError when loads is empty (no replicas).

    May use: plain Python. Nothing of minisgl (pick_replica and Dispatcher in
    minisgl/scheduler/data_parallel.py are this task).
    """
    raise NotImplementedError("12-beyond-one-machine/dp-dispatch")
