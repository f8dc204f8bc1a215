"""Chapter 00 quiz (getting started): the map of processes and channels (seed 000, section 1).

Reference answers. Graded by `pytest exercises --impl solutions -m ch00`.
Numbers: an int or float in the unit the question asks for. Choices: the letter, e.g. "b".
Short answers: a sentence or two in your own words (they are checked for the key ideas).
"""

# Q1 (choice). Over which channel does rank 0 pass the bytes of new requests to the other scheduler ranks?
#   a) an NCCL / PyNCCL all-gather   b) a gloo broadcast   c) ZMQ PUB/SUB
#   d) each rank reads the tokenizer's socket itself
Q1 = "c"

# Q2 (choice). Over which channel does the *number* of new messages of a step travel?
#   a) ZMQ PUSH/PULL   b) a broadcast on the gloo CPU group   c) an NCCL all-reduce   d) HTTP
Q2 = "b"

# Q3 (choice). What adds up the partial sums of a row-parallel layer during the forward pass?
#   a) the gloo CPU group, always   b) ZMQ
#   c) minisgl.distributed.all_reduce: gloo on CPU, NCCL or PyNCCL on GPUs
#   d) rank 0, which then broadcasts the result
Q3 = "c"

# Q4 (choice). Which scheduler ranks talk to the tokenizer and the detokenizer?
#   a) every rank   b) rank 0 only   c) the last rank   d) none: the API server talks to all ranks
Q4 = "b"

# Q5 (number). `python -m minisgl --tp-size 4` starts how many scheduler processes?
Q5 = 4

# Q6 (short answer). With several GPUs every rank runs its own scheduler. What does each one do, and
# why do the ranks still agree on every batch?
Q6 = "Each scheduler runs the same loop and the forward pass on its own shard of the model. Only rank 0 receives requests; it broadcasts them, so every rank sees the same messages in the same order and takes the same decisions."
