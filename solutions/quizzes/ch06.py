"""Chapter 06 quiz (rank-0 broadcast): keeping every rank on the same requests (seed 000, 3.4).

Reference answers. Graded by `pytest exercises --impl solutions -m ch06`.
Numbers: an int or float in the unit the question asks for. Choices: the letter, e.g. "b".
Short answers: a sentence or two in your own words (they are checked for the key ideas).
"""

# Q1 (choice). What does rank 0 broadcast over the gloo group in each step?
#   a) the messages   b) how many messages there are   c) the next Batch   d) the KV cache
Q1 = "b"

# Q2 (choice). Why does rank 0 broadcast the count even when it is 0?
#   a) every rank must join the same collective each step; a skipped one leaves the others waiting
#      or reading the next step's count   b) gloo rejects empty steps   c) for logging   d) it does not
Q2 = "a"

# Q3 (choice). Why do the message bytes go over ZMQ rather than a second gloo broadcast?
#   a) the receivers do not know the sizes in advance; ZMQ carries any size without a second collective
#   b) gloo cannot send uint8   c) ZMQ encrypts   d) ZMQ is the only channel between processes
Q3 = "a"

# Q4 (choice). How do all ranks make the same scheduling decisions?
#   a) same messages, same order, one deterministic scheduler (decode batches sorted by uid)
#   b) rank 0 broadcasts the whole Batch every step   c) every rank reads the tokenizer
#   d) they vote
Q4 = "a"

# Q5 (choice). A PUB socket drops messages for subscribers that have not connected yet. What does minisgl do?
#   a) resends every message   b) rank 0 waits for tp - 1 subscriptions on its XPUB socket, then a barrier
#   c) sleeps one second   d) nothing, messages are never lost
Q5 = "b"

# Q6 (number). In one step rank 0 pulled 3 messages. How many gloo broadcasts happen in that step?
Q6 = 1

# Q7 (short answer). How do all ranks end up working on the same batch?
Q7 = "Only rank 0 receives from the tokenizer. Each step it broadcasts the message count over gloo and publishes the bytes over ZMQ PUB/SUB, so every rank gets the same messages in the same order and the same scheduler makes the same batch."
