"""Chapter 01 quiz (TP first principles): column and row parallel linear layers (Megatron-LM, arXiv:1909.08053).

Replace each None with your answer, then run `pytest exercises -m ch01`.
choice: one letter, e.g. "b".  multi: every letter that applies, e.g. "bd" (the exact set scores).
order: every letter once, in your order, e.g. "dacb".  number: an int or float in the unit asked.
"""

# Q1 (number). A column-parallel layer has W of shape [out=4096, in=1024] (PyTorch layout). At tp = 4,
# how many rows does each rank's weight have?
Q1 = None

# Q2 (number). A row-parallel layer has W of shape [out=1024, in=4096]. At tp = 4, how many columns
# (input features) does each rank's weight have?
Q2 = None

# Q3 (number). In Q2, each rank's output before any communication has shape [tokens, ?]. What is ?
Q3 = None

# Q4 (choice). An MLP runs column-parallel gate/up, then row-parallel down. Where is the communication?
#   a) after gate/up only: an all-gather
#   b) after both layers: two all-reduces
#   c) nowhere: the shards line up
#   d) after down only: one all-reduce
Q4 = None

# Q5 (choice). Why is a row-parallel layer's bias added after the all-reduce?
#   a) added before it, the sum would count it tp times
#   b) the bias is itself split across the ranks
#   c) NCCL cannot add a bias during a reduction
#   d) adding it afterwards saves one kernel launch per layer
Q5 = None

# Q6 (choice). What does rank r hold after a column-parallel layer?
#   a) the full output, like every other rank
#   b) a partial sum of the full output
#   c) a slice of the output features
#   d) a slice of the tokens, all features
Q6 = None

# Q7 (multi). A linear layer with W [out, in] at tp = t. Which statements are true?
#   a) a row-parallel rank's weight shard is [out / t, in]
#   b) a column-parallel rank's weight shard is [out, in / t]
#   c) a column-parallel layer ends with an all-reduce of [tokens, out]
#   d) a column-parallel rank needs the whole input and produces [tokens, out / t]
#   e) a row-parallel rank produces a partial [tokens, out] that an all-reduce sums
Q7 = None
