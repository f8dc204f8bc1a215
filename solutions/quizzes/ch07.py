"""Chapter 07 quiz (the TP decoder layer): where the two all-reduces sit (seed 003 12, seed 004).

Reference answers. Graded by `pytest exercises --impl solutions -m ch07`.
Numbers: an int or float in the unit the question asks for. Choices: the letter, e.g. "b".
Short answers: a sentence or two in your own words (they are checked for the key ideas).
"""

# Q1 (number). How many all-reduces does one decoder layer run at tp > 1?
Q1 = 2

# Q2 (choice). Where are they?
#   a) after o_proj and after down_proj   b) after qkv_proj and after gate_up_proj
#   c) after attention and after each RMSNorm   d) only after the MLP
Q2 = "a"

# Q3 (number). Llama-3.1-8B (32 layers, 8 KV heads, head_dim 128), bf16 cache, tp = 2: KiB of KV
# cache per token on one rank?
Q3 = 64

# Q4 (number). Same model at tp = 8: KiB per token per rank?
Q4 = 16

# Q5 (number). The tiny test Llama has 2 KV heads. At tp = 4, how many KV heads does each rank store?
Q5 = 1

# Q6 (choice). Why does attention itself need no communication?
#   a) each rank's query heads attend only with KV heads that rank holds; heads are independent
#   b) attention is replicated on every rank   c) softmax runs an all-reduce internally
#   d) rank 0 computes it for everyone
Q6 = "a"

# Q7 (choice). Why does silu(gate) * up need no communication?
#   a) each rank holds gate and up rows for the same intermediate indices   b) SiLU is linear
#   c) it runs on rank 0 only   d) it does: an all-gather
Q7 = "a"

# Q8 (short answer). Why is a larger tp not always faster?
Q8 = "Each rank computes less, but every layer still needs two all-reduces, so the share of communication grows with tp; whether it pays off depends on the interconnect (NVLink or PCIe), the model size and the batch."
