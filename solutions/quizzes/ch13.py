"""Chapter 13 quiz (pipeline parallelism): the stage split, the message flow of a pipeline, micro-
batches, and the symmetric-memory all-reduce.

Reference answers: the autograder's keys (never part of a student release), graded by
`pytest exercises --impl solutions -m ch13`.
choice: one letter, e.g. "b".  multi: every letter that applies, e.g. "bd" (the exact set scores).
order: every letter once, in your order, e.g. "dacb".  number: an int or float in the unit asked.
"""

# Q1 (number). Llama-3.1-8B has 32 decoder layers. At pp_size 3, how many layers does stage 0 hold?
Q1 = 11

# Q2 (number). SmolLM2's 30 layers at pp_size 4: what is the index of the first layer of stage 2?
Q2 = 16

# Q3 (choice). With tied embeddings and pp_size 2, which stages load model.embed_tokens.weight?
#   a) the first stage only, since it embeds the tokens
#   b) the last stage only, since its LM head reads it
#   c) every stage, so each can embed its own input
#   d) the first and the last stage, one copy each
Q3 = "d"

# Q4 (number). Llama-3.1-8B in bf16 at tp 1: how many KiB does one micro-batch send across one stage
# boundary per token (hidden states and residual)?
Q4 = 16

# Q5 (choice). Besides the activations, what does stage 1 receive from stage 0 for every step?
#   a) the step's new messages and the tokens it completed
#   b) the batch's token ids, positions and KV slot indices
#   c) a copy of stage 0's whole scheduler state, pickled
#   d) nothing: it polls the tokenizer's queue on its own
Q5 = "a"

# Q6 (choice). When does the first stage wait for the tokens of its oldest micro-batch?
#   a) after every step, before it schedules the next batch
#   b) once pp_size are in flight, or the last step launched none
#   c) when the last stage broadcasts them to every rank at once
#   d) when IDLE_POLL_MS has passed since that batch was launched
Q6 = "b"

# Q7 (number). pp_size 2, 10 requests decoding: at most how many requests does one decode
# micro-batch hold?
Q7 = 5

# Q8 (multi). Which statements about the symmetric-memory all-reduce (--dist-backend symm) are true?
#   a) each rank copies its input into a buffer every rank can read
#   b) it runs NCCL's ring algorithm over a faster transport
#   c) messages above 1 MiB go to PyNCCL, the plugin below it
#   d) it needs NVLink multicast (NVLS) to be switched on
#   e) a CUDA graph can capture it, as it captures PyNCCL
Q8 = "ace"

# Q9 (order). Put one decode micro-batch's path through a two-stage pipeline in order.
#   a) stage 1 receives the activations, runs its layers, the norm and the LM head, and samples
#   b) stage 0 embeds the micro-batch's tokens and runs its layers
#   c) stage 0 fills in the tokens, pp_size steps after the launch, and forwards them to stage 1
#   d) stage 1 sends the sampled tokens back to stage 0
Q9 = "badc"

# Q10 (choice). On the same two GPUs, where does PP = 2 beat TP = 2?
#   a) the time per output token of a lone request
#   b) the weight memory each of the GPUs must hold
#   c) the bytes that cross between the GPUs per token
#   d) the number of processes the server starts up
Q10 = "c"

# Q11 (number). tp 2 x pp 2 on Llama-3.1-8B (16 layers per stage): how many all-reduces does one rank
# of stage 0 make in one forward pass?
Q11 = 33
