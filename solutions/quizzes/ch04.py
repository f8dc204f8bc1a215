"""Chapter 04 quiz (weight sharding): shard rules, KV-head replication, streaming (seed 000, 3.3).

Reference answers. Graded by `pytest exercises --impl solutions -m ch04`.
Numbers: an int or float in the unit the question asks for. Choices: the letter, e.g. "b".
Short answers: a sentence or two in your own words (they are checked for the key ideas).
"""

# Q1 (choice). Which projections are split along dim 0 (their output features)?
#   a) q_proj, k_proj, v_proj, gate_proj, up_proj   b) o_proj, down_proj
#   c) embed_tokens only   d) the RMSNorm weights
Q1 = "a"

# Q2 (choice). Which tensors stay whole on every rank?
#   a) RMSNorm weights and the biases of row-parallel layers   b) q_proj's bias
#   c) embed_tokens   d) gate_proj
Q2 = "a"

# Q3 (number). The tiny test Llama has 8 query heads and 2 KV heads. At tp = 4, how many ranks hold a
# copy of KV head 0?
Q3 = 2

# Q4 (number). Same model and tp: which KV head (0 or 1) does rank 3 hold?
Q4 = 1

# Q5 (choice). Why does the loader shard q, k and v first and fuse them afterwards?
#   a) it is faster
#   b) an even split of the fused [q; k; v] would hand a rank rows that do not match its heads
#   c) safetensors cannot read fused tensors   d) fusing first needs a GPU
Q5 = "b"

# Q6 (choice). SmolLM2-135M has 9 heads, 3 KV heads and intermediate_size 1536. Its valid tp sizes:
#   a) 1, 2, 3   b) 1, 3   c) 1, 3, 9   d) 1, 2, 4, 8
Q6 = "b"

# Q7 (short answer). Why does the loader stream the checkpoint one tensor at a time, and why does it
# merge q/k/v and gate/up before yielding them?
Q7 = "Streaming keeps the peak host memory near one full tensor plus the merge buffer instead of the whole checkpoint. The model's fused layers (qkv_proj, gate_up_proj) run one matmul, so they need the merged weight."

# Q8 (short answer). How does each rank load its weights?
Q8 = "Each rank reads every tensor, keeps only its own shard according to the tensor name (column: dim 0, row: dim 1, vocab rows, KV heads), and then merges its q/k/v and gate/up shards into the fused weights."
