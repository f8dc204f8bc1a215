"""Chapter 09 quiz (communication volume): the numbers for Llama-3.1-8B in bf16, from its
public config.json.

Reference answers: the autograder's keys (never part of a student release), graded by
`pytest exercises --impl solutions -m ch09`.
choice: one letter, e.g. "b".  multi: every letter that applies, e.g. "bd" (the exact set scores).
order: every letter once, in your order, e.g. "dacb".  number: an int or float in the unit asked.
Llama-3.1-8B: hidden_size 4096, 32 layers, vocab 128256. 1 KiB = 1024 bytes, 1 MiB = 1024 KiB.
"""

# Q1 (number). All-reduces in one forward pass at tp > 1?
Q1 = 65

# Q2 (number). KiB per token in one all-reduce?
Q2 = 8

# Q3 (number). KiB per token over all the all-reduces of one forward?
Q3 = 520

# Q4 (number). The ring all-reduce factor 2(t - 1)/t at tp = 4?
Q4 = 1.5

# Q5 (number). KiB one rank sends per token at tp = 8 (ring all-reduce)?
Q5 = 910

# Q6 (number). KiB of logits one rank receives per sampled token in the all-gather at tp = 4?
Q6 = 188

# Q7 (number). A 2048-token prefill chunk: MiB of all-reduce payload over one forward?
Q7 = 1040

# Q8 (number). A decode step with batch 16: KiB in one all-reduce?
Q8 = 128

# Q9 (number). A custom all-reduce handles messages below 8 MiB. How many tokens is that?
Q9 = 1024

# Q10 (choice). What limits the communication of a small-batch decode step?
#   a) the bandwidth of the link (NVLink or PCIe)
#   b) the compute each GPU does between them
#   c) the fixed cost of 65 synchronizations
#   d) the size of the KV cache on each GPU
Q10 = "c"

# Q11 (choice). And of a 2048-token prefill chunk?
#   a) the number of synchronizations per step
#   b) the bandwidth of the link (NVLink or PCIe)
#   c) how fast the tokenizer can split the prompt
#   d) nothing: at that size communication is free
Q11 = "b"

# Q12 (multi). TP = t divides each GPU's weight reads by t. Which statements about its cost are true?
#   a) every layer adds two all-reduces: two synchronizations per layer and step
#   b) the bytes each rank sends per token fall as 1 / t
#   c) at batch 1 the all-reduces are skipped
#   d) the bytes each rank sends per token approach the payload itself, once, as t grows
#   e) over PCIe, or with a small model or small batches, the cost can outweigh the saving
Q12 = "ae"
