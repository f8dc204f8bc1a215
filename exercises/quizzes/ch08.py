"""Chapter 08 quiz (process structures): vLLM versus SGLang and minisgl.

Replace each None with your answer, then run `pytest exercises -m ch08`.
choice: one letter, e.g. "b".  multi: every letter that applies, e.g. "bd" (the exact set scores).
order: every letter once, in your order, e.g. "dacb".  number: an int or float in the unit asked.
"""

# Q1 (choice). vLLM at TP = 2: how many schedulers run?
#   a) one per GPU worker process
#   b) one, in the EngineCore process
#   c) none: the workers schedule in turn
#   d) one per request, started on arrival
Q1 = None

# Q2 (choice). SGLang (and minisgl) at TP = 2?
#   a) one scheduler, in the API server process
#   b) one scheduler, in the detokenizer process
#   c) one per rank, each running the full loop
#   d) none: rank 0 forwards ready-made batches
Q2 = None

# Q3 (choice). How does vLLM hand each step's scheduling result to its workers?
#   a) a broadcast through a shared-memory message queue
#   b) ZMQ PUB/SUB from the API server process
#   c) an NCCL broadcast of the whole batch
#   d) an HTTP call from the executor to every worker, one at a time
Q3 = None

# Q4 (choice). Whose output does vLLM's executor collect?
#   a) one rank's: TP rank 0 of the last pipeline stage
#   b) every worker's, which it compares with each other
#   c) the first worker's to answer, whichever it is
#   d) none: the workers answer the client themselves
Q4 = None

# Q5 (number). Pipeline parallelism, Llama-3.1-8B, bf16: KiB per token crossing one stage boundary
# (hidden states and residual)?
Q5 = None

# Q6 (number). vLLM data-parallel ranks of an MoE model check whether any rank is busy every how many steps?
Q6 = None

# Q7 (choice). Which design spends less CPU on scheduling?
#   a) always vLLM's, since it schedules once for all of its workers
#   b) always SGLang's, since it sends less
#   c) neither: they spend exactly the same
#   d) it depends on the workload; it has not been measured
Q7 = None

# Q8 (multi). Where does scheduling happen, and what crosses process boundaries each step?
#   a) vLLM's workers each run the scheduler again on what they receive
#   b) vLLM schedules once per step, in EngineCore
#   c) minisgl's rank 0 sends the scheduled Batch to the other ranks
#   d) SGLang and minisgl run a scheduler on every rank
#   e) vLLM sends SchedulerOutput to its workers; minisgl's rank 0 sends only the new requests
Q8 = None
