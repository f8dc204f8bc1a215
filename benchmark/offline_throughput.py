"""Offline decode throughput on this CPU, side by side in one run: llama.cpp on the same GGUF file
(single stream), transformers' batched `generate`, and minisgl at several batch sizes with fp32,
bf16 and 4-bit GGUF weights, the last also with a bf16 KV cache. Before the runs it measures this
machine's read bandwidth and matmul peak, and prints each result as a fraction of them: the
bandwidth floor (every weight byte read once per decode step) at batch 1, the matmul peak at batch
>= 16. That peak is measured again right before each batched run, since a shared machine's speed
drifts within minutes. The fraction is of the whole run: the matmul flops it computed (2 per
weight per token through the decoder's linear layers, prompt tokens included and, for minisgl,
those its prefix cache skipped left out; the LM head once per generated token) over its seconds.
For minisgl it is also given for decode steps alone, from a second run of the same prompts, whose
prefill its prefix cache then skips, beside the memory ceiling of those steps: the share of the
peak they could reach if reading memory were all they did (each step's weights and the keys and
values it attends over, at the read bandwidth measured right before). Where that ceiling is under
100 %, no kernel can take them to the peak.
For minisgl's bf16 and GGUF runs it also counts the greedy answers equal to its fp32 run's. Last,
llama.cpp and minisgl's GGUF single stream take turns `--rounds` times and the median ratio is
printed: on a shared machine whose speed drifts between runs, neighbouring runs compare fairly.

    python benchmark/offline_throughput.py                         # everything, embedded SmolLM2
    python benchmark/offline_throughput.py --batch-sizes 1 32 --new-tokens 32 --minisgl float32 gguf
    python benchmark/offline_throughput.py --until-eos --new-tokens 256   # chat-like: stop at EOS

llama.cpp runs only when `llama-cpp-python` is importable; without it the script says so and skips
that row. It is a benchmark-only dependency (the `bench` extra, not part of `make install`) that
compiles llama.cpp from source with cmake and a C++ compiler, for this CPU (GGML_NATIVE is on by
default; CMAKE_ARGS passes other llama.cpp build options): 10 to 30 minutes on 2 cores.

    CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) .venv/bin/pip install "llama-cpp-python==0.3.36"

On CPUs with AMX (recent Xeons) that build turns on llama.cpp's AMX kernels, which die with an
illegal instruction in some virtual machines (llama.cpp pull request #26954). The script first
runs llama.cpp for a few tokens in a child process, so such a crash skips its row with a message
instead of ending the run; rebuild it without AMX (still AVX-512) as the message says.

Every engine gets `--threads` threads (default: all cores). Close other programs first: the script
prints the load average before and after, and a busy machine's numbers are not worth keeping.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from gguf import GGUFReader
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from minisgl import LLM, SamplingParams
from minisgl.kvcache import KVCachePool
from minisgl.layers.quantized import PackedWeight
from minisgl.models.default_model import ensure_default_model
from minisgl.models.gguf_weights import find_model_gguf

LLAMA_CPP_INSTALL = 'CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) .venv/bin/pip install "llama-cpp-python==0.3.36"'
LLAMA_CPP_WITHOUT_AMX = ('CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=ON '
                         '-DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON" '
                         + LLAMA_CPP_INSTALL.replace("pip install",
                                                     "pip install --force-reinstall --no-deps --no-cache-dir"))
MINISGL_VARIANTS = {"float32": dict(dtype="float32", quantization="none"),
                    "bfloat16": dict(dtype="bfloat16", quantization="none"),
                    "gguf": dict(dtype="auto", quantization="gguf"),  # 4-bit weights, dtype as auto picks
                    "gguf-kv-bf16": dict(dtype="auto", quantization="gguf", kv_cache_dtype="bfloat16")}


@dataclass
class Machine:
    threads: int
    read_gbs: float  # GB/s of a large sequential read
    peak_gflops: dict[str, float]  # dtype -> GFLOP/s of a large matmul


@dataclass
class MatmulFlops:
    """Flops of one token through the model's matmuls: 2 per weight."""

    decoder: int  # the decoder layers' linear weights, for every token the model reads
    head: int  # the LM head, for every token the model writes

    def of_run(self, prompt_tokens: int, generated: int, requests: int) -> int:
        """A run's flops: each request reads its (uncached) prompt, then feeds back every token it
        generated but the last; the LM head runs once per generated token."""
        return (prompt_tokens + generated - requests) * self.decoder + generated * self.head


@dataclass
class Result:
    engine: str
    weights: str
    batch: int
    tok_s: float
    bytes_per_step: int  # weight bytes one decode step reads
    gflops: float | None = None  # batch > 1: GFLOP/s of the run's matmuls (MatmulFlops.of_run over its seconds)
    peak_gflops: float | None = None  # batch > 1: the matmul peak in the run's dtype, measured right before it
    same_as_fp32: str = ""  # minisgl: "k/n" greedy answers equal to minisgl fp32's at this batch
    decode_gflops: float | None = None  # minisgl: the same prompts again, their prefill cached: decode steps
    decode_peak_gflops: float | None = None  # measured right before that second run
    decode_ceiling_gflops: float | None = None  # what memory allows those decode steps (decode_ceiling)
    decode_read_gbs: float | None = None  # the read bandwidth that ceiling assumes, measured right before


def measure_machine(threads: int) -> Machine:
    """Read bandwidth (sum of 512 MiB, median of 5 runs) and matmul peak (F.linear of 512 rows by a
    1536 x 1536 weight, the call the engine makes; a square `a @ a` in bf16 takes a much slower path
    on AVX2)."""
    torch.set_num_threads(threads)
    peak = {name: matmul_peak(name) for name in ("float32", "bfloat16")}
    return Machine(threads, read_bandwidth(), peak)


def read_bandwidth() -> float:
    """GB/s of a sum over 512 MiB of fp32, far past any cache (median of 5 runs)."""
    big = torch.ones(128 << 20)
    return big.nbytes / median_seconds(lambda: big.sum(), 5) / 1e9


def matmul_peak(dtype: str, repeats: int = 10) -> float:
    """GFLOP/s of F.linear(512 rows, a 1536 x 1536 weight) in `dtype`, the fastest of `repeats` runs:
    other work on the machine can only slow a run down, so the fastest is the nearest to the peak."""
    x, weight = torch.randn(512, 1536).to(getattr(torch, dtype)), torch.randn(1536, 1536).to(getattr(torch, dtype))
    F.linear(x, weight)
    fastest = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        F.linear(x, weight)
        fastest = min(fastest, time.perf_counter() - start)
    return 2 * 512 * 1536**2 / fastest / 1e9


def median_seconds(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def make_prompts(tokenizer, count: int, seed: int) -> list[list[int]]:
    """Chat prompts of varied length, built from a fixed list of questions."""
    topics = ["the moon", "tensor parallelism", "a bicycle", "Paris", "photosynthesis", "the ocean", "prime numbers",
              "coffee", "volcanoes", "the internet", "chess", "rain", "music", "bread", "trains", "the brain"]
    generator = torch.Generator().manual_seed(seed)
    prompts = []
    for i in range(count):
        detail = int(torch.randint(1, 4, (1,), generator=generator))
        question = f"Explain {topics[i % len(topics)]} in {detail * 2} sentences" + " please" * detail + "."
        chat = [{"role": "user", "content": question}]
        text = tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
        prompts.append(tokenizer(text, add_special_tokens=False)["input_ids"])
    return prompts


def run_transformers(model, tokenizer, prompts: list[list[int]], new_tokens: int, until_eos: bool,
                     flops: MatmulFlops) -> tuple[float, float]:
    """Generated tokens per second of one batched greedy `generate` (left-padded), and the GFLOP/s
    of its matmuls (the prompts' own tokens, not their padding)."""
    tokenizer.padding_side = "left"
    batch = tokenizer.pad({"input_ids": prompts}, return_tensors="pt")
    eos = model.generation_config.eos_token_id
    eos_ids = set(eos if isinstance(eos, list) else [eos])
    start = time.perf_counter()
    with torch.inference_mode():
        output = model.generate(**batch, max_new_tokens=new_tokens, min_new_tokens=None if until_eos else new_tokens,
                                do_sample=False, pad_token_id=tokenizer.pad_token_id or 0)
    elapsed = time.perf_counter() - start
    real = len(prompts) * new_tokens
    if until_eos:
        real = 0
        for row in output[:, batch["input_ids"].shape[1] :].tolist():
            ends = [i for i, token in enumerate(row) if token in eos_ids]
            real += ends[0] + 1 if ends else len(row)  # up to and including the first EOS
    run_flops = flops.of_run(sum(map(len, prompts)), real, len(prompts))
    return real / elapsed, run_flops / elapsed / 1e9


def run_minisgl(
    llm: LLM, prompts: list[list[int]], new_tokens: int, until_eos: bool, flops: MatmulFlops
) -> tuple[float, float, list[list[int]]]:
    """Generated tokens per second, the GFLOP/s of the run's matmuls (prompt tokens found in the
    prefix cache are not computed, so not counted), and the greedy answers."""
    params = SamplingParams(temperature=0, max_tokens=new_tokens, ignore_eos=not until_eos)
    before = computed_prompt_tokens(llm)
    start = time.perf_counter()
    outputs = llm.generate(prompts, params)
    elapsed = time.perf_counter() - start
    generated = sum(len(o.token_ids) for o in outputs)
    run_flops = flops.of_run(computed_prompt_tokens(llm) - before, generated, len(prompts))
    return generated / elapsed, run_flops / elapsed / 1e9, [o.token_ids for o in outputs]


def computed_prompt_tokens(llm: LLM) -> int:
    """Prompt tokens the engine has prefilled so far, less those its prefix cache supplied."""
    stats = llm.backend.scheduler.stats()
    return stats.prompt_tokens_total - stats.cached_tokens_total


def llama_cpp_stream(gguf_path: Path, threads: int) -> Callable[[list[int], int], float]:
    """llama.cpp on `gguf_path`, warmed up: a function giving single-stream tokens per second of
    `new_tokens` greedy tokens after `prompt`, prompt processing included as for the others."""
    from llama_cpp import Llama

    llm = Llama(model_path=str(gguf_path), n_threads=threads, n_threads_batch=threads, n_ctx=1024, verbose=False)

    def run(prompt: list[int], new_tokens: int) -> float:
        start = time.perf_counter()
        for produced, _ in enumerate(llm.generate(prompt, temp=0.0, reset=True), start=1):
            if produced == new_tokens:
                break
        return new_tokens / (time.perf_counter() - start)

    run([1, 2, 3], 4)  # warm-up
    return run


def llama_cpp_crash(gguf_path: Path, threads: int) -> str | None:
    """Why llama.cpp cannot run here, or None: a few tokens in a child process first, since a crash
    inside its C++ kernels (a signal, not an exception) would end this whole script."""
    code = ("import sys; from llama_cpp import Llama; "
            "llm = Llama(model_path=sys.argv[1], n_threads=int(sys.argv[2]), n_ctx=64, verbose=False); "
            "[None for _, _ in zip(range(4), llm.generate([1, 2, 3], temp=0.0))]")
    try:
        child = subprocess.run([sys.executable, "-c", code, str(gguf_path), str(threads)], capture_output=True,
                               text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return "llama.cpp did not finish 4 tokens in 300 s"
    if child.returncode == -signal.SIGILL:
        return ("llama.cpp died of an illegal instruction (its AMX kernels, llama.cpp pull request #26954); "
                f"rebuild it without AMX:\n    {LLAMA_CPP_WITHOUT_AMX}")
    if child.returncode != 0:
        last = (child.stderr.strip().splitlines() or [f"exit status {child.returncode}"])[-1]
        return f"llama.cpp failed on {gguf_path.name}: {last}"
    return None


def single_stream_rounds(model_dir: Path, gguf_path: Path, prompt: list[int], new_tokens: int, threads: int,
                         rounds: int, flops: MatmulFlops) -> None:
    """llama.cpp and minisgl's GGUF pick, one single stream each, alternated `rounds` times: on a
    shared machine whose speed drifts, the median ratio of neighbouring runs is the fair comparison."""
    llama_cpp = llama_cpp_stream(gguf_path, threads)
    llm = LLM(model_dir, progress=False, cpu_threads=threads, **MINISGL_VARIANTS["gguf"])
    llama_cpp(prompt, new_tokens)  # a discarded round each: llama.cpp's first pass over a new prompt
    run_minisgl(llm, [prompt], new_tokens, False, flops)  # is slow, and minisgl's records its batch-1 CPU graph
    ratios = []
    print(f"\nsingle stream, alternated ({rounds} rounds): llama.cpp, minisgl gguf (tok/s)")
    for round_index in range(rounds):
        theirs = llama_cpp(prompt, new_tokens)
        ours = run_minisgl(llm, [prompt], new_tokens, False, flops)[0]
        ratios.append(ours / theirs)
        print(f"  round {round_index + 1}: {theirs:6.1f}  {ours:6.1f}  -> {ours / theirs:.2f}x")
    llm.shutdown()
    print(f"  median ratio minisgl / llama.cpp: {statistics.median(ratios):.2f}x "
          f"(range {min(ratios):.2f}-{max(ratios):.2f})")


def gguf_weight_type(gguf_path: Path) -> str:
    """The block type that holds most of a GGUF file's weights, e.g. "Q4_1"."""
    counts = Counter()
    for tensor in GGUFReader(gguf_path).tensors:
        counts[tensor.tensor_type.name] += int(tensor.n_elements)
    return counts.most_common(1)[0][0]


def minisgl_step_bytes(llm: LLM, rows: int = 1) -> int:
    """Weight bytes a decode step of `rows` rows reads: a quantized weight's own bytes up to its row
    limit, its dense copy's above it."""
    engine = llm.backend.scheduler.engine
    total = 0
    for name, weight in engine.model.state_dict().items():
        if isinstance(weight, PackedWeight):
            read = weight.dense if weight.takes_dense(rows) else weight  # what a matmul of `rows` rows reads
            total += read.kernel_bytes if isinstance(read, PackedWeight) else read.nbytes
        elif not (name.endswith("embed_tokens.weight") and not engine.model_config.tie_word_embeddings):
            total += weight.nbytes  # an untied embedding is only looked up, one row per token
    return total


def decode_ceiling(llm: LLM, prompts: list[list[int]], answers: list[list[int]], flops: MatmulFlops,
                   read_gbs: float) -> float:
    """GFLOP/s the decode steps of a run could reach if reading memory were all they did: their
    matmul flops over the seconds `read_gbs` needs for the bytes they cannot avoid reading, which
    are each step's weights (in the form its batch size uses) and the cached keys and values of
    every request in it. The step that makes a request's k-th token (k >= 2) attends over its prompt
    and k - 1 generated tokens."""
    k_buffer = llm.backend.scheduler.engine.kv_pool.k_buffer  # [layers, slots, kv_heads, head_dim]
    layers, _, kv_heads, head_dim = k_buffer.shape
    kv_bytes_per_token = KVCachePool.bytes_per_token(layers, kv_heads, head_dim, k_buffer.dtype)
    lengths = [len(answer) for answer in answers]
    step_flops = step_bytes = 0
    for k in range(2, max(lengths) + 1):
        attending = [len(prompt) + k - 1 for prompt, n in zip(prompts, lengths) if n >= k]
        step_flops += len(attending) * (flops.decoder + flops.head)
        step_bytes += minisgl_step_bytes(llm, len(attending)) + kv_bytes_per_token * sum(attending)
    return read_gbs * step_flops / step_bytes


def matmul_flops(model_dir: Path) -> MatmulFlops:
    """The model's flops per token, counted on a weightless copy (the meta device allocates nothing)."""
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_dir))
    linear = sum(p.numel() for n, p in model.named_parameters() if n.endswith("_proj.weight"))
    return MatmulFlops(decoder=2 * linear, head=2 * model.config.vocab_size * model.config.hidden_size)


def report(results: list[Result], machine: Machine, dtype_of: dict[str, str]) -> None:
    baseline = {r.batch: r.tok_s for r in results if r.engine == "transformers" and r.weights == "float32"}
    print(f"\n{'engine':<13}{'weights':<56}{'batch':>5}{'tok/s':>9}{'vs hf fp32':>11}{'=fp32':>7}  of the machine")
    for r in results:
        ratio = f"{r.tok_s / baseline[r.batch]:.2f}x" if r.batch in baseline else "-"
        if r.batch == 1:
            floor = machine.read_gbs * 1e9 / r.bytes_per_step  # tok/s if only the weight reads took time
            megabytes = r.bytes_per_step / 1e6
            share = f"{r.tok_s / floor:5.1%} of bandwidth floor ({floor:.0f} tok/s, {megabytes:.0f} MB/step)"
        else:
            dtype = dtype_of.get(r.weights, "float32")
            share = f"{r.gflops / r.peak_gflops:5.1%} of {dtype} matmul peak ({r.peak_gflops:.0f} GFLOP/s)"
            if r.decode_gflops is not None:
                ceiling = min(1.0, r.decode_ceiling_gflops / r.decode_peak_gflops)
                share += (f", {r.decode_gflops / r.decode_peak_gflops:.1%} in decode steps "
                          f"(memory ceiling {ceiling:.0%} at {r.decode_read_gbs:.1f} GB/s)")
        print(f"{r.engine:<13}{r.weights:<56}{r.batch:>5}{r.tok_s:>9.1f}{ratio:>11}{r.same_as_fp32:>7}  {share}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="checkpoint dir (default: the embedded SmolLM2)")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 16, 32, 64])
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--transformers", nargs="*", default=["float32", "bfloat16"], help="dtypes (none: skip)")
    parser.add_argument("--minisgl", nargs="*", default=list(MINISGL_VARIANTS), choices=list(MINISGL_VARIANTS))
    parser.add_argument("--until-eos", action="store_true", help="stop each request at EOS (chat-like)")
    parser.add_argument("--rounds", type=int, default=5,
                        help="then alternate llama.cpp and minisgl's GGUF single stream this many times (0: skip)")
    args = parser.parse_args()

    model_dir = Path(args.model) if args.model else ensure_default_model()
    gguf_path = find_model_gguf(model_dir)
    load = os.getloadavg()[0]
    machine = measure_machine(args.threads)
    print(f"model {model_dir.name}, {args.threads} threads, load average {load:.1f}, "
          + (f"up to {args.new_tokens} tokens, stop at EOS" if args.until_eos else f"{args.new_tokens} new tokens"))
    print(f"machine: {torch.backends.cpu.get_cpu_capability()}, read {machine.read_gbs:.1f} GB/s, matmul peak "
          + ", ".join(f"{d} {g:.1f} GFLOP/s" for d, g in machine.peak_gflops.items()))
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    flops = matmul_flops(model_dir)
    prompts = {batch: make_prompts(tokenizer, batch, seed=batch) for batch in args.batch_sizes}
    results: list[Result] = []
    dtype_of = {"float32": "float32", "bfloat16": "bfloat16"}  # weights label -> dtype of its matmuls

    if importlib.util.find_spec("llama_cpp") is None:
        print(f"llama.cpp skipped: llama-cpp-python is not installed; it builds llama.cpp from source "
              f"(cmake, a C++ compiler, 10-30 min on 2 cores):\n    {LLAMA_CPP_INSTALL}")
    elif gguf_path is None:
        print(f"llama.cpp skipped: no *.gguf file next to the checkpoint in {model_dir}")
    elif 1 not in prompts:
        print("llama.cpp skipped: it runs a single stream, and --batch-sizes has no 1")
    elif crash := llama_cpp_crash(gguf_path, args.threads):
        print(f"llama.cpp skipped: {crash}")
    else:
        file_bytes = sum(int(t.n_bytes) for t in GGUFReader(gguf_path).tensors)
        tok_s = llama_cpp_stream(gguf_path, args.threads)(prompts[1][0], args.new_tokens)
        results.append(Result("llama.cpp", gguf_weight_type(gguf_path), 1, tok_s, file_bytes))
        print(f"llama.cpp done: {tok_s:.1f} tok/s", flush=True)

    for name in args.transformers:
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, name)).eval()
        step_bytes = sum(p.nbytes for n, p in model.named_parameters() if not n.endswith("embed_tokens.weight")
                         or model.config.tie_word_embeddings)
        torch.set_num_threads(args.threads)
        run_transformers(model, tokenizer, make_prompts(tokenizer, 2, seed=99), 4, False, flops)  # warm-up
        for batch in args.batch_sizes:
            peak = matmul_peak(name) if batch > 1 else None
            tok_s, gflops = run_transformers(model, tokenizer, prompts[batch], args.new_tokens, args.until_eos, flops)
            results.append(Result("transformers", name, batch, tok_s, step_bytes, gflops, peak))
            print(f"transformers {name} batch {batch}: {tok_s:.1f} tok/s", flush=True)
        del model

    answers: dict[tuple[str, int], list[list[int]]] = {}  # (variant, batch) -> greedy answers
    for variant in args.minisgl:
        if variant.startswith("gguf") and gguf_path is None:
            print(f"minisgl {variant} skipped: no *.gguf next to the checkpoint")
            continue
        # cpu_threads: the engine runs, and dtype "auto" probes, with --threads threads
        llm = LLM(model_dir, progress=False, cpu_threads=args.threads, **MINISGL_VARIANTS[variant])
        config = llm.config  # what dtype / quantization "auto" resolved to
        rows = "every batch" if config.max_quantized_rows is None else f"<={config.max_quantized_rows} rows"
        label = variant if not variant.startswith("gguf") else f"gguf {rows}, {config.dtype}"
        if config.matmul_dtype != config.dtype:
            label += f", {config.matmul_dtype} matmuls"
        if config.kv_cache_dtype != config.dtype:
            label += f", {config.kv_cache_dtype} KV"
        dtype_of[label] = config.matmul_dtype  # the dtype its dense matmuls run in, so the peak to compare with
        step_bytes = minisgl_step_bytes(llm)
        run_minisgl(llm, make_prompts(tokenizer, 2, seed=99), 4, False, flops)  # warm-up
        for batch in args.batch_sizes:
            peak = matmul_peak(config.matmul_dtype) if batch > 1 else None
            tok_s, gflops, answers[variant, batch] = run_minisgl(llm, prompts[batch], args.new_tokens,
                                                                 args.until_eos, flops)
            same = ""
            if variant != "float32" and ("float32", batch) in answers:
                equal = sum(a == b for a, b in zip(answers[variant, batch], answers["float32", batch]))
                same = f"{equal}/{batch}"
            decode_gflops = decode_peak = ceiling = read_gbs = None
            if batch > 1:
                decode_peak, read_gbs = matmul_peak(config.matmul_dtype), read_bandwidth()
                decode_gflops, decode_answers = run_minisgl(llm, prompts[batch], args.new_tokens, args.until_eos,
                                                            flops)[1:]
                ceiling = decode_ceiling(llm, prompts[batch], decode_answers, flops, read_gbs)
            results.append(Result("minisgl", label, batch, tok_s, step_bytes, gflops, peak, same, decode_gflops,
                                  decode_peak, ceiling, read_gbs))
            print(f"minisgl {label} batch {batch}: {tok_s:.1f} tok/s", flush=True)
        llm.shutdown()

    report(results, machine, dtype_of)
    if args.rounds and any(r.engine == "llama.cpp" for r in results) and "gguf" in args.minisgl:
        single_stream_rounds(model_dir, gguf_path, prompts[1][0], args.new_tokens, args.threads, args.rounds,
                             flops)
    print(f"\nload average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
          + ("  -- BUSY MACHINE: these numbers are not reliable" if os.getloadavg()[0] > 0.5 + args.threads else ""))


if __name__ == "__main__":
    main()
