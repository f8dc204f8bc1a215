"""Chapter 05 quiz (vocab parallelism): embedding and LM head split by token id.

Replace each None with your answer, then run `pytest exercises -m ch05`.
choice: one letter, e.g. "b".  multi: every letter that applies, e.g. "bd" (the exact set scores).
order: every letter once, in your order, e.g. "dacb".  number: an int or float in the unit asked.
"""

# Q1 (number). Vocabulary 49152 (SmolLM2) at tp = 3: how many rows does each rank's shard have?
Q1 = None

# Q2 (number). Vocabulary 1001 at tp = 4: how many rows does each rank's shard have?
Q2 = None

# Q3 (number). Same case: how many padding rows are there in total?
Q3 = None

# Q4 (choice). What does a rank's embedding write for a token id outside its shard?
#   a) zeros
#   b) the row of the id modulo the shard size
#   c) the last row of its shard, a padding row
#   d) nothing: its output has fewer rows
Q4 = None

# Q5 (choice). Which collective follows the embedding lookup?
#   a) an all-gather of the rows
#   b) a broadcast from rank 0
#   c) none: every rank has its rows
#   d) an all-reduce (sum)
Q5 = None

# Q6 (choice). Which collective follows the LM head?
#   a) an all-reduce of the logits
#   b) a reduce-scatter of the logits
#   c) an all-gather, then the padding is cut off
#   d) none: each rank samples from its own ids, then they vote
Q6 = None

# Q7 (number). During the prefill of one 512-token prompt, how many rows of logits does the LM head
# compute for that request?
Q7 = None

# Q8 (number). Vocabulary 1001 at tp = 4: the first token id owned by rank 2.
Q8 = None
