"""Chapter 14 quiz (experts across ranks): routing, the TP and EP splits of the experts, the
dispatch permutation, bytes per token and load imbalance.

Replace each None with your answer, then run `pytest exercises -m ch14`.
choice: one letter, e.g. "b".  multi: every letter that applies, e.g. "bd" (the exact set scores).
order: every letter once, in your order, e.g. "dacb".  number: an int or float in the unit asked.
"""

# Q1 (number). Qwen3-30B-A3B has 128 experts and routes 8 per token. With --moe-parallel ep at
# tp 4, how many experts does each rank hold?
Q1 = None

# Q2 (choice). With --moe-parallel tp, what does one MoE layer communicate per forward?
#   a) one all-reduce of [tokens, hidden], as the dense MLP
#   b) an all-to-all of the pair rows, then an all-gather
#   c) an all-gather of every expert's weight shards
#   d) nothing: each rank runs its own experts alone
Q2 = None

# Q3 (number). topk_ids = [[2, 0], [1, 2], [0, 3]] (3 tokens, k = 2); experts 0 and 1 live on rank
# 0, experts 2 and 3 on rank 1. How many (token, expert) pairs does rank 1 receive?
Q3 = None

# Q4 (order). Put the steps of one expert-parallel MoE layer in order, as one rank sees them.
#   a) all-to-all the pair rows to their experts' ranks
#   b) route this rank's share of the tokens (top-k)
#   c) run the local experts on the rows that arrived
#   d) all-to-all the outputs back, weight and sum per token
#   e) all-gather every rank's tokens for the next attention
Q4 = None

# Q5 (choice). Why does the dispatch exchange counts before the rows?
#   a) gloo needs a barrier before any all-to-all
#   b) each receiver must size its buffer and splits
#   c) the counts carry the router's probabilities
#   d) NCCL refuses rows of two different dtypes
Q5 = None

# Q6 (number). Expert parallelism at tp 2 with k = 8, hidden 2048 and bf16: how many KiB of pair
# rows does a rank hand to the dispatch all-to-all per token of its share of the batch?
Q6 = None

# Q7 (multi). Compared with the TP split at the same tp size, which are true of the EP split?
#   a) each rank stores the same bytes of expert weights
#   b) under TP, each expert's matmuls are as wide as on a single GPU
#   c) EP hands fewer bytes to collectives at k = 8, tp = 2
#   d) a rank's work depends on which experts the router picks
#   e) EP needs no collective at all after the experts run
Q7 = None

# Q8 (choice). At tp 2 under EP, one rank's experts get 70 % of a step's pairs. What does the
# layer's combine wait for?
#   a) the average rank's experts to finish
#   b) nothing: the all-to-all overlaps compute
#   c) the rank with the most pairs to finish
#   d) the router to rebalance the next step
Q8 = None

# Q9 (choice). Why does minisgl run expert-parallel decode without CUDA graphs?
#   a) the expert weights move between the steps
#   b) the router's softmax cannot be captured
#   c) NCCL's all-to-all cannot run on a stream
#   d) the all-to-all's split sizes are read on the host
Q9 = None

# Q10 (number). A router's top-2 probabilities are 0.3 and 0.1. With norm_topk_prob = true, what
# weight does the first expert's output get?
Q10 = None
