"""Chapter 08 quiz (process structures): vLLM versus SGLang and minisgl (seed 004).

Replace each None with your answer, then run `pytest exercises -m ch08`.
Numbers: an int or float in the unit the question asks for. Choices: the letter, e.g. "b".
Short answers: a sentence or two in your own words (they are checked for the key ideas).
"""

# Q1 (choice). vLLM at TP = 2: how many schedulers run?
#   a) one, in the EngineCore process   b) one per GPU worker   c) none   d) one per request
Q1 = None

# Q2 (choice). SGLang (and minisgl) at TP = 2?
#   a) one per rank, each running the full scheduling loop   b) one in the main process
#   c) one in the detokenizer   d) none
Q2 = None

# Q3 (choice). How does vLLM hand each step's scheduling result to its workers?
#   a) it broadcasts SchedulerOutput through a shared-memory message queue   b) ZMQ PUB/SUB
#   c) an NCCL broadcast   d) HTTP
Q3 = None

# Q4 (choice). Whose output does vLLM's executor collect?
#   a) every worker's   b) one rank's only (TP rank 0 of the last pipeline stage)
#   c) the fastest worker's   d) none
Q4 = None

# Q5 (number). Pipeline parallelism, Llama-3.1-8B, bf16: KiB per token crossing one stage boundary
# (hidden states and residual)?
Q5 = None

# Q6 (number). vLLM data-parallel ranks of an MoE model check whether any rank is busy every how many steps?
Q6 = None

# Q7 (choice). Which design spends less CPU on scheduling?
#   a) always vLLM's   b) always SGLang's
#   c) it depends on new requests per step and the cost of scheduling; it has not been measured
#   d) they are identical
Q7 = None

# Q8 (short answer). Where does scheduling happen in vLLM and in SGLang / minisgl, and what crosses
# process boundaries each step?
Q8 = None
