"""Chapter 04 quiz (weight sharding): shard rules, KV-head replication, streaming.

Reference answers: the autograder's keys (never part of a student release), graded by
`pytest exercises --impl solutions -m ch04`.
choice: one letter, e.g. "b".  multi: every letter that applies, e.g. "bd" (the exact set scores).
order: every letter once, in your order, e.g. "dacb".  number: an int or float in the unit asked.
"""

# Q1 (choice). Which projections are split along dim 0 (their output features)?
#   a) o_proj and down_proj, the row-parallel ones
#   b) q, k, v, gate and up projections
#   c) embed_tokens only; every projection splits dim 1
#   d) the RMSNorm weights and the q/k norms
Q1 = "b"

# Q2 (choice). Which tensors stay whole on every rank?
#   a) q_proj's bias
#   b) embed_tokens, padded so that the tp shards are equal
#   c) RMSNorm weights and row-parallel biases
#   d) gate_proj and up_proj
Q2 = "c"

# Q3 (number). The tiny test Llama has 8 query heads and 2 KV heads. At tp = 4, how many ranks hold a
# copy of KV head 0?
Q3 = 2

# Q4 (number). Same model and tp: which KV head (0 or 1) does rank 3 hold?
Q4 = 1

# Q5 (choice). Why does the loader shard q, k and v first and fuse them afterwards?
#   a) sharding a fused tensor is slower on a CPU than three small ones
#   b) safetensors cannot read a fused tensor
#   c) fusing first would need the GPU's memory
#   d) an even slice of [q; k; v] misses a rank's heads
Q5 = "d"

# Q6 (choice). SmolLM2-135M has 9 heads, 3 KV heads and intermediate_size 1536. Its valid tp sizes:
#   a) 1, 3
#   b) 1, 2, 3
#   c) 1, 3, 9
#   d) 1, 2, 4, 8
Q6 = "a"

# Q7 (multi). Why does the loader stream the checkpoint, and merge only after sharding?
#   a) streaming keeps peak host memory near the size of the whole checkpoint
#   b) streaming lets each rank skip the tensors it does not need
#   c) qkv_proj and gate_up_proj each run as one matmul, so they need the merged weight
#   d) merging happens before sharding, so that every rank gets equal rows
#   e) a fused tensor is yielded as soon as its last part has arrived
Q7 = "ce"

# Q8 (order). One rank loads `model.layers.0.self_attn.k_proj.weight`. Put its steps in order.
#   a) cat the q, k and v shards, in that order, into qkv_proj and yield it
#   b) read the full tensor from the safetensors file
#   c) keep this rank's KV-head rows and drop the full tensor
#   d) hold the shard in the merge buffer until the q and v shards are there
Q8 = "bcda"
