"""Chapter 10 quiz (the GPU path): launch-bound decode, the HBM floor, CUDA graphs, overlap
scheduling, and why PyNCCL rather than gloo on GPUs (benchmark/GPU_RESULTS.md, chapter 09).

Reference answers: the autograder's keys (never part of a student release), graded by
`pytest exercises --impl solutions -m ch10`.
choice: one letter, e.g. "b".  multi: every letter that applies, e.g. "bd" (the exact set scores).
order: every letter once, in your order, e.g. "dacb".  number: an int or float in the unit asked.
"""

# Q1 (choice). SmolLM2-135M at batch 1 on one H200: HBM floor 0.067 ms, CUDA-graph step 1.09 ms,
# eager step 11.86 ms. What keeps the step so far above its floor?
#   a) the weights do not fit in HBM, so they stream from host memory
#   b) the KV cache of one request is larger than all the weights
#   c) ~330 kernels of under 1 MB each: fixed per-launch costs set the time
#   d) bf16 matrix multiplies are compute-bound at batch 1, even on an H200
Q1 = "c"

# Q2 (number). The HBM floor in microseconds of one batch-1 decode step of a model with 500 million
# bf16 parameters, counting the weights only (ignore the KV cache), at 4 TB/s (4e12 bytes/s)?
Q2 = 250

# Q3 (number). SmolLM2 (30 layers, 3 KV heads, head_dim 64) with a bf16 KV cache: how many MiB of
# keys and values does one decode step read for 64 requests with 1,000 cached tokens each?
# (1 MiB = 1024 * 1024 bytes.)
Q3 = 1406.25

# Q4 (choice). What does a CUDA graph capture?
#   a) the Python code of the forward pass, which a replay runs again faster
#   b) the kernels it launches, with their pointers, grids and scalars
#   c) the output values of the forward pass, kept for the next call
#   d) a copy of the model weights in a buffer of its own
Q4 = "b"

# Q5 (number). CudaGraphRunner with max_bs = 256 (buckets 1, 2, 4, 8, then every 8 up to 256):
# the graph of which batch size replays a decode batch of 20 requests?
Q5 = 24

# Q6 (choice). Why do CUDA-graph padding rows attend to KV slot 0 and write to out slot -1?
#   a) slot 0 holds the BOS token's keys, which every request shares
#   b) -1 wraps around to the pool's last slot, which is kept free for padding rows
#   c) the GPU skips every row whose slot is 0 or below it
#   d) page 0 is never given out, and slot -1 makes store_kv write nothing
Q6 = "d"

# Q7 (choice). Why does minisgl run decode eagerly (no CUDA graphs) when tp > 1 goes through gloo?
#   a) gloo is slower than a graph replay, so graphs would not help
#   b) gloo works on the host: a copy and a wait, which capture forbids
#   c) gloo has no all-gather, which the LM head needs in a graph
#   d) a graph may hold at most one collective of any kind
Q7 = "b"

# Q8 (multi). With overlap scheduling on, a running request's output_ids ends in -3. Which are true?
#   a) it stands for the token of batch row 2 of the step still running on the device
#   b) the scheduler waits for that step to finish, then writes the token in
#   c) the device puts that step's argmax in its place before the model reads it
#   d) the next decode step carries it as one of its input ids
#   e) it marks a request that was aborted while it ran
Q8 = "acd"

# Q9 (choice). Why does dist_backend="auto" choose gloo for tp = 2 on a machine with one GPU?
#   a) NCCL refuses two ranks of one communicator on one device
#   b) gloo is faster than NCCL when the ranks share a GPU
#   c) PyNCCL supports tp = 1 only, one rank per machine
#   d) the unique id cannot reach a second rank on the same GPU
Q9 = "a"

# Q10 (choice). In the chapter's trace of a CPU run with overlap_schedule=True, where is the "tokens" instant
# of decode step N on a rank's lane?
#   a) before the forward span of step N starts
#   b) inside the forward span of step N, before its all-gather
#   c) after the forward span of step N + 1 has started
#   d) only at the end of the run, once every request has finished
Q10 = "c"
