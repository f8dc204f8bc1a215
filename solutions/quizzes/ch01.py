"""Chapter 01 quiz (TP first principles): column and row parallel linear layers (seed 003, 2-3).

Reference answers. Graded by `pytest exercises --impl solutions -m ch01`.
Numbers: an int or float in the unit the question asks for. Choices: the letter, e.g. "b".
Short answers: a sentence or two in your own words (they are checked for the key ideas).
"""

# Q1 (number). A column-parallel layer has W of shape [out=4096, in=1024] (PyTorch layout). At tp = 4,
# how many rows does each rank's weight have?
Q1 = 1024

# Q2 (number). A row-parallel layer has W of shape [out=1024, in=4096]. At tp = 4, how many columns
# (input features) does each rank's weight have?
Q2 = 1024

# Q3 (number). In Q2, each rank's output before any communication has shape [tokens, ?]. What is ?
Q3 = 1024

# Q4 (choice). An MLP runs column-parallel gate/up, then row-parallel down. Where is the communication?
#   a) after gate/up only   b) after down only: one all-reduce   c) after both   d) nowhere
Q4 = "b"

# Q5 (choice). Why is a row-parallel layer's bias added after the all-reduce?
#   a) it is faster   b) added before, the sum would count it tp times
#   c) the bias is split by rank   d) NCCL cannot add a bias
Q5 = "b"

# Q6 (choice). What does rank r hold after a column-parallel layer?
#   a) the full output   b) a slice of the output features   c) a partial sum of the output
#   d) a slice of the tokens
Q6 = "b"

# Q7 (short answer). For a column-parallel and a row-parallel linear at tp = t: which dimension of the
# weight does each split, what are the input and output shapes, and where does communication happen?
Q7 = "Column parallel splits the output features (W rows, dim 0): [tokens, in] -> [tokens, out/t], no communication. Row parallel splits the input features (dim 1): [tokens, in/t] -> partial [tokens, out], then an all-reduce sums the partial results."
