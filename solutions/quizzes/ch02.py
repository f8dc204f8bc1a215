"""Chapter 02 quiz (launch): spawning one process per rank and waiting for them (seed 000, 3.1).

Reference answers. Graded by `pytest exercises --impl solutions -m ch02`.
Numbers: an int or float in the unit the question asks for. Choices: the letter, e.g. "b".
Short answers: a sentence or two in your own words (they are checked for the key ideas).
"""

# Q1 (choice). Why does the launcher use the "spawn" start method rather than "fork"?
#   a) it starts faster   b) each rank gets a fresh interpreter, with no copied CUDA, torch or ZMQ state
#   c) fork does not exist on Linux   d) spawned processes use less memory
Q1 = "b"

# Q2 (number). In the mini-SGLang launcher of seed 000, with num_tokenizers = 2, how many acks does
# start_subprocess wait for?
Q2 = 4

# Q3 (number). minisgl's ChildGroup of an LLM at tp = 4: how many acks from ranks does it wait for?
Q3 = 4

# Q4 (choice). What must a rank do before it constructs any layer?
#   a) load the weights   b) set_tp_info(rank, size)   c) allocate the KV cache   d) capture CUDA graphs
Q4 = "b"

# Q5 (choice). When does ChildGroup.wait_ready return?
#   a) right after every Process.start()   b) once every rank acked "ready" (it raises otherwise)
#   c) after the first request is served   d) after the HTTP server is up
Q5 = "b"

# Q6 (choice). In seed 000, what tp_info does the parent process hold right after parsing arguments?
#   a) DistributedInfo(0, tp_size)   b) None   c) DistributedInfo(tp_size, 0)   d) one per rank
Q6 = "a"

# Q7 (short answer). Why must the launcher wait for acks with a timeout, and what must it do when a
# rank fails to start?
Q7 = "A rank that dies never acks, so without a timeout the launcher would hang forever. On a failure it raises an error that names the rank, and it must terminate the other ranks so no orphan processes remain."
