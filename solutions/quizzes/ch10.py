"""Chapter 10 quiz (the GPU path): launch-bound decode, the HBM floor, CUDA graphs, overlap
scheduling, and why PyNCCL rather than gloo on GPUs (benchmark/GPU_RESULTS.md, seed 004).

Reference answers. Graded by `pytest exercises --impl solutions -m ch10`.
Numbers: an int or float in the unit the question asks for. Choices: the letter, e.g. "b".
Short answers: a sentence or two in your own words (they are checked for the key ideas).
"""

# Q1 (choice). SmolLM2-135M at batch 1 on one H200: HBM floor 0.067 ms, CUDA-graph step 1.09 ms,
# eager step 11.86 ms. What keeps the step so far above its floor?
#   a) the weights do not fit in HBM, so they stream from host memory
#   b) each of its ~330 kernels moves under 1 MB: per-launch and per-kernel fixed costs, not bytes,
#      set the time (the step is launch-bound)
#   c) the KV cache of one request is larger than the weights
#   d) bf16 matrix multiplies are compute-bound at batch 1
Q1 = "b"

# Q2 (number). The HBM floor in microseconds of one batch-1 decode step of a model with 500 million
# bf16 parameters, counting the weights only (ignore the KV cache), at 4 TB/s (4e12 bytes/s)?
Q2 = 250

# Q3 (number). SmolLM2 (30 layers, 3 KV heads, head_dim 64) with a bf16 KV cache: how many MiB of
# keys and values does one decode step read for 64 requests with 1,000 cached tokens each?
# (1 MiB = 1024 * 1024 bytes.)
Q3 = 1406.25

# Q4 (choice). What does a CUDA graph capture?
#   a) the kernels launched on the capturing stream with their arguments (pointers, grid, scalars);
#      a replay launches them again on whatever data those addresses then hold
#   b) the Python code of the forward pass, which replay re-runs faster
#   c) the forward pass's output values, cached for the next call
#   d) a copy of the model weights in a private buffer
Q4 = "a"

# Q5 (number). CudaGraphRunner with max_bs = 256 (buckets 1, 2, 4, 8, then every 8 up to 256):
# the graph of which batch size replays a decode batch of 20 requests?
Q5 = 24

# Q6 (choice). Why do CUDA-graph padding rows attend to KV slot 0 and write to out slot -1?
#   a) page 0 is never handed to a request, so reading it is valid and harms nobody; a negative
#      slot makes store_kv write nothing, so no real request's cache changes
#   b) slot 0 holds the BOS token's keys, which every request shares
#   c) -1 wraps around to the pool's last slot, which is reserved for padding
#   d) the GPU skips every row whose slot is 0
Q6 = "a"

# Q7 (choice). Why does minisgl run decode eagerly (no CUDA graphs) when tp > 1 goes through gloo?
#   a) gloo reduces on CPU threads: a CUDA tensor is copied to the host and waited for, which is no
#      kernel on the capturing stream, and waiting is forbidden during capture
#   b) gloo is slower than a graph replay, so graphs would not help
#   c) gloo has no all-gather
#   d) a graph may hold at most one collective
Q7 = "a"

# Q8 (short answer). With overlap scheduling on, a running request's output_ids ends in -3. What
# does -3 stand for, and what replaces it, where and when?
Q8 = "-3 is a placeholder for the token of batch row 2 of the step still running on the GPU (-(2 + 1)); the next decode step carries it as an input id, and the device replaces it with that step's argmax (resolve_placeholders, in Engine._forward_eager or as a CUDA graph's first kernel) before the model reads it, with no host sync."

# Q9 (choice). Why does dist_backend="auto" choose gloo for tp = 2 on a machine with one GPU?
#   a) NCCL gives each rank of a communicator its own GPU and refuses (invalid usage) two ranks on
#      one device
#   b) gloo is faster than NCCL on a single GPU
#   c) PyNCCL supports tp = 1 only
#   d) the NCCL unique id cannot be broadcast between ranks on one GPU
Q9 = "a"
