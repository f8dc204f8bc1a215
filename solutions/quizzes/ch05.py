"""Chapter 05 quiz (vocab parallelism): embedding and LM head split by token id (seed 003, 5).

Reference answers. Graded by `pytest exercises --impl solutions -m ch05`.
Numbers: an int or float in the unit the question asks for. Choices: the letter, e.g. "b".
"""

# Q1 (number). Vocabulary 49152 (SmolLM2) at tp = 3: how many rows does each rank's shard have?
Q1 = 16384

# Q2 (number). Vocabulary 1001 at tp = 4: how many rows does each rank's shard have?
Q2 = 251

# Q3 (number). Same case: how many padding rows are there in total?
Q3 = 3

# Q4 (choice). What does a rank's embedding write for a token id outside its shard?
#   a) a random row   b) zeros   c) the id itself   d) nothing: its output has fewer rows
Q4 = "b"

# Q5 (choice). Which collective follows the embedding lookup?
#   a) all-gather   b) all-reduce   c) broadcast from rank 0   d) none
Q5 = "b"

# Q6 (choice). Which collective follows the LM head?
#   a) all-reduce   b) all-gather, then the padding columns are dropped   c) reduce-scatter
#   d) none: each rank samples from its own shard
Q6 = "b"

# Q7 (number). During the prefill of one 512-token prompt, how many rows of logits does the LM head
# compute for that request?
Q7 = 1

# Q8 (number). Vocabulary 1001 at tp = 4: the first token id owned by rank 2.
Q8 = 502
