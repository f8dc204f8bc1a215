"""Chapter 12 quiz (beyond one machine): multi-node tensor parallelism, data parallelism and the
communication counter.

Replace each None with your answer, then run `pytest exercises -m ch12`.
choice: one letter, e.g. "b".  multi: every letter that applies, e.g. "bd" (the exact set scores).
order: every letter once, in your order, e.g. "dacb".  number: an int or float in the unit asked.
"""

# Q1 (number). --tp-size 8 --nnodes 2: how many scheduler ranks does each node run?
Q1 = None

# Q2 (number). --tp-size 4 --nnodes 2: which global tp rank is local rank 1 on node 1?
Q2 = None

# Q3 (choice). What does node 1 of a two-node server run?
#   a) an HTTP server that forwards requests to node 0
#   b) its ranks, plus a tokenizer for its own requests
#   c) one scheduler rank for every GPU of the group
#   d) its share of the scheduler ranks and a launcher
Q3 = None

# Q4 (choice). With --dist-init-addr 10.0.0.1:29500, what does node 0 serve at 10.0.0.1:29501?
#   a) the torch.distributed store the ranks meet at
#   b) rank 0's broadcast of each step's messages
#   c) the links from the other nodes' launchers
#   d) the OpenAI-compatible HTTP API for clients
Q4 = None

# Q5 (multi). Which of these cross the network between the nodes of a two-node run?
#   a) the ranks' exchange of addresses through the store
#   b) the all-reduces of every layer
#   c) the tokenizer's requests to rank 0
#   d) rank 0's broadcast of each step's new messages
#   e) the detokenizer's text for the HTTP server
Q5 = None

# Q6 (choice). Node 1's launcher is killed with SIGKILL. What tells node 0 first?
#   a) the link from node 1's launcher closes
#   b) rank 0's next collective times out
#   c) node 1 sends `stop` just before it dies
#   d) the TCP store reports a missing rank
Q6 = None

# Q7 (order). Node 0 is stopped with Ctrl-C. Put what follows in order.
#   a) node 1's ranks leave their loops and exit with code 0
#   b) node 0's launcher says `stop` on the link to node 1
#   c) rank 0 broadcasts the ShutdownRequest to every rank
#   d) node 1's launcher prints "node 0 ended the run" and exits 0
Q7 = None

# Q8 (number). Round-robin over 3 replicas with loads [4, 0, 9]; the controller sent 7 requests
# before this one. Which replica (its index) gets it?
Q8 = None

# Q9 (number). Least-load with loads [3, 1, 1, 2]: which replica (its index) gets the next request?
Q9 = None

# Q10 (choice). How does the DP controller know each replica's waiting + running requests?
#   a) it asks every replica for its queue lengths each step
#   b) the detokenizer forwards each finished output to it
#   c) it counts what it sent, less what replicas report done
#   d) each replica broadcasts its load every 16 steps
Q10 = None

# Q11 (choice). On the same two GPUs, what does DP = 2 have that TP = 2 does not?
#   a) a lower time per output token for each request
#   b) no collectives at all during a forward pass
#   c) half the weight memory on each of the GPUs
#   d) twice the requests per replica in each step
Q11 = None

# Q12 (number). The counter on, the 12-layer llama-125m at tp = 2: how many collectives (all kinds)
# does one decode step make?
Q12 = None

# Q13 (multi). Which statements about the communication counter are true?
#   a) it records every collective of chapter 06's control plane too
#   b) it is off unless --comm-stats-dir (or comm_stats_dir) is given
#   c) a collective's time includes waiting for the slowest rank
#   d) on CUDA it keeps decode inside CUDA graphs
#   e) its bytes are those of the tensor each rank hands in
Q13 = None
