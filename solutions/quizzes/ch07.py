"""Chapter 07 quiz (the TP decoder layer): where the two all-reduces sit.

Reference answers: the autograder's keys (never part of a student release), graded by
`pytest exercises --impl solutions -m ch07`.
choice: one letter, e.g. "b".  multi: every letter that applies, e.g. "bd" (the exact set scores).
order: every letter once, in your order, e.g. "dacb".  number: an int or float in the unit asked.
"""

# Q1 (number). How many all-reduces does one decoder layer run at tp > 1?
Q1 = 2

# Q2 (choice). Where are they?
#   a) after qkv_proj and after gate_up_proj
#   b) after attention and after each RMSNorm
#   c) after o_proj and after down_proj
#   d) both after the MLP, none in attention
Q2 = "c"

# Q3 (number). Llama-3.1-8B (32 layers, 8 KV heads, head_dim 128), bf16 cache, tp = 2: KiB of KV
# cache per token on one rank?
Q3 = 64

# Q4 (number). Same model at tp = 8: KiB per token per rank?
Q4 = 16

# Q5 (number). The tiny test Llama has 2 KV heads. At tp = 4, how many KV heads does each rank store?
Q5 = 1

# Q6 (choice). Why does attention itself need no communication?
#   a) attention is replicated on every rank
#   b) a rank's query heads use only KV heads it holds
#   c) softmax runs an all-reduce inside it
#   d) rank 0 computes attention for every rank
Q6 = "b"

# Q7 (choice). Why does silu(gate) * up need no communication?
#   a) SiLU is a linear function
#   b) it runs on rank 0 only
#   c) it does: an all-gather of gate and up must come first
#   d) a rank holds gate and up for the same indices
Q7 = "d"

# Q8 (multi). Why is a larger tp not always faster? Which statements are true?
#   a) every layer still needs its two all-reduces, whatever tp is
#   b) a larger tp leaves less compute per rank to hide the communication behind
#   c) the all-reduce payload per token shrinks as tp grows
#   d) whether it pays depends on the interconnect, the model size and the batch
#   e) each rank's matmuls shrink as tp grows, and small matmuls use a GPU less efficiently
Q8 = "abde"

# Q9 (number). The chapter's trace of the tiny Llama (2 decoder layers) at tp = 2: how many collective spans
# sit under the forward span of one decode step, on each rank?
Q9 = 6
