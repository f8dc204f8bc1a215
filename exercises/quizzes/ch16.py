"""Chapter 16 quiz (the CPU path): the plug-in seam, GGUF's 4-bit shards, bytes against arithmetic,
the precision probe, CPU graphs and the bf16 KV cache.

Replace each None with your answer, then run `pytest exercises -m ch16`.
choice: one letter, e.g. "b".  multi: every letter that applies, e.g. "bd" (the exact set scores).
order: every letter once, in your order, e.g. "dacb".  number: an int or float in the unit asked.
"""

# Q1 (choice). A TP linear layer's forward is `kernels_for(x).linear(x, self.weight, self.bias)`. Where
# does a CPU run decide that a 4-bit weight goes to minisgl's C kernel instead of F.linear?
#   a) in the CPU kernel table's linear, which asks if the weight is packed
#   b) in LinearBase.forward, which looks at the dtype of its weight before multiplying
#   c) in the loader, which swaps each linear layer for a quantized layer class
#   d) in shard_tensor, which hands every rank a tensor already packed for C
Q1 = None

# Q2 (number). A Q4_1 block stores 32 weights as a float16 scale, a float16 minimum and 32 four-bit
# codes. How many bits per weight is that?
Q2 = None

# Q3 (choice). SmolLM2 at tp = 3 with `--quantization gguf`: why does rank 1's down_proj shard (a
# row-parallel cut of 1536 inputs) split no scale?
#   a) the loader dequantizes every row-parallel weight before it is sharded
#   b) 4-bit row-parallel weights are replicated on every rank, not split
#   c) each rank's 512 inputs make exactly 16 whole groups of 32 inputs each
#   d) the scales belong to output rows, so a cut of inputs never splits them
Q3 = None

# Q4 (multi). Which are true of the CPU plug-in, minisgl/cpu/?
#   a) minisgl/layers/ imports it to find the fastest kernel for each layer
#   b) it installs its kernel table once the model is built and loaded
#   c) it swaps some layers' weights for objects with a matmul of their own
#   d) it gives shard_tensor a second set of rules for 4-bit weights
#   e) a 4-bit weight reaches the model through the same shard_tensor as a dense one
Q4 = None

# Q5 (choice). Why does a batch-1 decode step of SmolLM2 run faster on a CPU with the GGUF's 4-bit
# weights than with fp32 ones?
#   a) integer multiplies are faster than float FMAs on every x86 CPU
#   b) it reads about a fifth of the weight bytes, and bytes decide one row
#   c) the 4-bit kernels skip the LM head, which dominates a step
#   d) it computes in bf16, which has twice the throughput of fp32 on a CPU
Q5 = None

# Q6 (number). SmolLM2 (30 layers, 3 KV heads, head_dim 64) with `--kv-cache-dtype bfloat16` at tp = 1:
# how many KiB of KV cache does one token take?
Q6 = None

# Q7 (choice). Above a few rows, minisgl multiplies GGUF blocks with a second kernel that turns a tile
# of weights back into floats once, then uses float FMAs. Why?
#   a) with many rows arithmetic decides, and one dequantization serves every row
#   b) the matrix-vector kernel cannot read a Q4_1 block for more than one row at once
#   c) PyTorch forbids integer arithmetic in batches of more than 8 rows
#   d) the dequantized tile is written to disk and reused by the next step
Q7 = None

# Q8 (order). A Q4_1 q_proj weight on its way from the GGUF file to a decode step, at tp = 2. Put the
# steps in order.
#   a) pack_gguf_weights turns the fused codes into a BlockQ4Weight
#   b) GGUFCheckpoint yields it as an Int4Weight
#   c) CpuKernelTable.linear calls the weight's own matmul
#   d) shard_tensor keeps this rank's rows of codes, scales and minimums
#   e) torch.cat stacks it with the k and v shards into qkv_proj
Q8 = None

# Q9 (choice). Where minisgl's C kernels are built, `dtype="auto"` keeps fp32 activations even on a CPU
# whose bf16 matmuls are faster. Why?
#   a) bf16 activations would make the probe's own timings unreliable and slow
#   b) a CPU's KV cache cannot hold bf16 keys and values at all
#   c) oneDNN refuses bf16 activations on every CPU that lacks AMX
#   d) the C kernels and CPU graphs take fp32 only: bf16 runs the rest eagerly
Q9 = None

# Q10 (multi). A CPU graph replays the C calls recorded for a decode step. Which are true?
#   a) a replay runs the layers' Python forwards again, with their checks off
#   b) capture refuses `x + 1` on a tensor, since a replay would skip the addition
#   c) each batch size gets its own recording, made on its first decode step
#   d) a batch of 5 is padded to the recording made for a batch of 8
#   e) CPU graphs also record tp = 2 steps, whose all-reduces run over gloo
Q10 = None

# Q11 (choice). What does `--kv-cache-dtype bfloat16` change for an fp32 model on a CPU?
#   a) scores, softmax and the weighted sum of attention run in bf16
#   b) every activation is kept in bf16 between one layer and the next
#   c) keys and values are rounded again each time attention reads them back
#   d) keys and values are rounded once, when stored, and read back exactly
Q11 = None
