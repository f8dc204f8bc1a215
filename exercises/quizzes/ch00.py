"""Chapter 00 quiz (getting started): the map of processes and channels.

Replace each None with your answer, then run `pytest exercises -m ch00`.
choice: one letter, e.g. "b".  multi: every letter that applies, e.g. "bd" (the exact set scores).
order: every letter once, in your order, e.g. "dacb".  number: an int or float in the unit asked.
"""

# Q1 (choice). Over which channel does rank 0 pass the bytes of new requests to the other scheduler ranks?
#   a) an NCCL / PyNCCL all-gather of the encoded messages
#   b) a gloo broadcast of the message bytes
#   c) each rank reads the tokenizer's socket on its own
#   d) ZMQ PUB/SUB from rank 0
Q1 = None

# Q2 (choice). Over which channel does the *number* of new messages of a step travel?
#   a) ZMQ PUSH/PULL from the tokenizer
#   b) an NCCL all-reduce on the GPU
#   c) a broadcast on the gloo CPU group
#   d) an HTTP request to every rank
Q2 = None

# Q3 (choice). What adds up the partial sums of a row-parallel layer during the forward pass?
#   a) minisgl.distributed.all_reduce
#   b) the gloo CPU group, whatever the device
#   c) rank 0, which then broadcasts the sum
#   d) ZMQ, which carries every tensor between the ranks
Q3 = None

# Q4 (choice). Which scheduler ranks talk to the tokenizer and the detokenizer?
#   a) every rank, each for its own requests
#   b) rank 0 only
#   c) the last rank, which holds the LM head
#   d) none: the API server talks to every rank
Q4 = None

# Q5 (number). `python -m minisgl --tp-size 4` starts how many scheduler processes?
Q5 = None

# Q6 (multi). With several ranks, every rank runs its own scheduler. Which statements are true?
#   a) each rank runs the forward pass on its own shard of the weights
#   b) each rank pulls new requests from the tokenizer itself
#   c) rank 0 forwards every new message, so all ranks see the same messages in the same order
#   d) the ranks agree on every batch because they run the same scheduling code on the same inputs
#   e) only rank 0 takes requests from the tokenizer and sends tokens to the detokenizer
Q6 = None
