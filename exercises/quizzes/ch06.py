"""Chapter 06 quiz (rank-0 broadcast): keeping every rank on the same requests.

Replace each None with your answer, then run `pytest exercises -m ch06`.
choice: one letter, e.g. "b".  multi: every letter that applies, e.g. "bd" (the exact set scores).
order: every letter once, in your order, e.g. "dacb".  number: an int or float in the unit asked.
"""

# Q1 (choice). What does rank 0 broadcast over the gloo group in each step?
#   a) the encoded messages themselves
#   b) the next Batch it scheduled
#   c) how many new messages there are
#   d) its KV cache page table
Q1 = None

# Q2 (choice). Why does rank 0 broadcast the count even when it is 0?
#   a) gloo refuses to run a collective step that carries no data
#   b) every rank logs the count and needs a value
#   c) it does not: rank 0 skips it when it has nothing
#   d) every rank must join the same collective each step
Q2 = None

# Q3 (choice). Why do the message bytes go over ZMQ rather than a second gloo broadcast?
#   a) gloo cannot send uint8 tensors
#   b) the receivers do not know the sizes in advance
#   c) ZMQ encrypts what it carries
#   d) ZMQ is the only channel that connects the scheduler processes
Q3 = None

# Q4 (choice). How do all ranks make the same scheduling decisions?
#   a) the same messages, in the same order, into one deterministic scheduler
#   b) rank 0 broadcasts the whole Batch it scheduled to the other ranks every step
#   c) every rank reads the tokenizer's socket and sorts what it gets
#   d) the ranks vote on each batch with a gloo all-reduce of their choices
Q4 = None

# Q5 (choice). A PUB socket drops messages for subscribers that have not connected yet. What does minisgl do?
#   a) rank 0 waits for tp - 1 subscriptions, then all ranks meet at a barrier
#   b) rank 0 resends every message until every rank has acknowledged it
#   c) rank 0 sleeps one second before it publishes the first message
#   d) nothing: a ZMQ socket never loses a message that it was given to send out
Q5 = None

# Q6 (number). In one step rank 0 pulled 3 messages. How many gloo broadcasts happen in that step?
Q6 = None

# Q7 (order). Put one scheduler step of a tp = 2 run in order.
#   a) rank 1 reads that many payloads from its SUB socket
#   b) rank 0 takes the new messages from the tokenizer's socket
#   c) every rank runs the same scheduler on the same messages
#   d) rank 0 broadcasts the count over gloo, then publishes each payload
Q7 = None

# Q8 (order). In the merged trace of a tp = 2 run, put these moments of one request in time order.
#   a) rank 1's receive span, which names the request, ends
#   b) rank 0's broadcast span, which names the request, starts
#   c) rank 1's first all-reduce of the step that prefills the request ends
#   d) the front-end's "request in" instant
Q8 = None
