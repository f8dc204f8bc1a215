"""Chapter 02 quiz (launch): spawning one process per rank and waiting for them.

Replace each None with your answer, then run `pytest exercises -m ch02`.
choice: one letter, e.g. "b".  multi: every letter that applies, e.g. "bd" (the exact set scores).
order: every letter once, in your order, e.g. "dacb".  number: an int or float in the unit asked.
"""

# Q1 (choice). Why are ranks started with "spawn" or from a fork server, never forked from the launcher?
#   a) a child forked from the launcher starts slower
#   b) a forked child cannot import torch a second time
#   c) the child then inherits none of the launcher's CUDA, thread-pool or ZMQ state
#   d) such children share the launcher's memory pages
Q1 = None

# Q2 (number). In mini-SGLang's launcher (server/launch.py at commit 20fcd7f), with num_tokenizers = 2,
# how many acks does start_subprocess wait for?
Q2 = None

# Q3 (number). minisgl's ChildGroup of an LLM at tp = 4: how many acks from ranks does it wait for?
Q3 = None

# Q4 (choice). What must a rank do before it constructs any layer?
#   a) load its weights
#   b) allocate the KV cache
#   c) capture its CUDA graphs for every batch size
#   d) call set_tp_info(rank, size)
Q4 = None

# Q5 (choice). When does ChildGroup.wait_ready return?
#   a) right after every Process.start() call
#   b) once every rank has acked "ready"
#   c) after the HTTP server answers /health
#   d) after the first request has been served
Q5 = None

# Q6 (choice). In mini-SGLang (server/args.py at commit 20fcd7f), what tp_info does the parent process
# hold right after parsing arguments?
#   a) DistributedInfo(0, tp_size)
#   b) None
#   c) DistributedInfo(tp_size, 0)
#   d) one DistributedInfo per rank
Q6 = None

# Q7 (multi). A launcher starts the ranks and waits for their acks. Which must it do?
#   a) count one deadline from the start, not a fresh timeout per ack
#   b) wait on the ack queue with no timeout, since a rank always acks in the end
#   c) notice a rank that exited before acking, without waiting for the deadline
#   d) raise an error that names the rank that failed
#   e) leave the other ranks running after a failure, so they can be reused
#   f) stop every rank it started before it raises
Q7 = None

# Q8 (choice). In the trace of the chapter's tp = 2 start-up, the rank that starts recording first spends most
# of its start-up span in one inner span. Which, and why?
#   a) load weights: the first rank reads the whole checkpoint for both ranks
#   b) join the group: it waits at the rendezvous until the other rank arrives
#   c) size the KV cache: it measures the free memory of the whole machine
#   d) start-up ends at once: the first rank acks before its peer has started
Q8 = None
