"""mini-SGLang's offline workload on a GPU: 256 requests, input and output lengths uniform in
[100, 1024] (seed 0), random token ids, ignore_eos, Qwen3-0.6B shape with random weights.

    python benchmark/gpu_offline.py [--num-requests 256] [--compare-no-overlap]

Runs `LLM(model, device="cuda")` with its defaults (the batch limits sized from the GPU and the KV
pool, minisgl/engine/sizing.py) and with the settings tuned by hand for this workload (every
request running, an 8,192-token prefill budget, graphs up to 256), side by side, each twice in the
order A B B A. Prints both times, output tokens/s and the share of the HBM roofline: the time an
ideal engine needs when every decode step streams the weights once and each running request's KV
once at the copy bandwidth measured in this run (all requests running together, prefill free). Real runs also
prefill, so 100% is out of reach; the share says how close the engine gets.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

import torch

from minisgl import LLM
from minisgl.core import SamplingParams
from minisgl.testing.shapes import SHAPES, kv_bytes_per_token, make_shape_dir, parameter_bytes

from gpu_decode import copy_bandwidth


def workload(num_requests: int, vocab: int, seed: int = 0) -> tuple[list[list[int]], list[int]]:
    rng = random.Random(seed)
    input_lens = [rng.randint(100, 1024) for _ in range(num_requests)]
    output_lens = [rng.randint(100, 1024) for _ in range(num_requests)]
    prompts = [[rng.randint(0, vocab - 1) for _ in range(n)] for n in input_lens]
    return prompts, output_lens


def roofline_seconds(shape: str, input_lens: list[int], output_lens: list[int], bandwidth: float) -> float:
    """Decode steps of the ideal schedule: step t reads the weights and the KV of every request
    still generating (its prompt plus the t tokens before)."""
    weights, per_token = parameter_bytes(shape), kv_bytes_per_token(shape)
    total = 0.0
    for t in range(max(output_lens)):
        live_tokens = sum(n + t for n, m in zip(input_lens, output_lens) if m > t)
        total += weights + live_tokens * per_token
    return total / bandwidth


TUNED = dict(max_prefill_tokens=8192, cuda_graph_max_bs=256)  # and max_running_requests = the requests


def run_once(model_dir: Path, prompts: list[list[int]], output_lens: list[int], settings: dict) -> float:
    with LLM(model_dir, device="cuda", dtype="bfloat16", load_format="dummy", progress=False, **settings) as llm:
        warm = [SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)] * 4
        llm.generate([p[:200] for p in prompts[:4]], warm)  # kernels compiled, caches warm
        print(f"    running {llm.config.max_running_requests}, prefill {llm.config.max_prefill_tokens}, "
              f"KV pool {llm.backend.engine.kv_pool.num_slots:,} tokens", flush=True)
        params = [SamplingParams(temperature=0, max_tokens=m, ignore_eos=True) for m in output_lens]
        torch.cuda.synchronize()
        begin = time.perf_counter()
        outputs = llm.generate(prompts, params)
        torch.cuda.synchronize()
        elapsed = time.perf_counter() - begin
    assert [len(o.token_ids) for o in outputs] == output_lens
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-requests", type=int, default=256)
    parser.add_argument("--shape", default="qwen3-0.6b", choices=sorted(SHAPES))
    parser.add_argument("--compare-no-overlap", action="store_true", help="also time with overlap scheduling off")
    args = parser.parse_args()

    bandwidth = copy_bandwidth()
    prompts, output_lens = workload(args.num_requests, SHAPES[args.shape]["vocab_size"])
    input_lens = [len(p) for p in prompts]
    floor_s = roofline_seconds(args.shape, input_lens, output_lens, bandwidth)
    out_tokens = sum(output_lens)
    print(f"GPU: {torch.cuda.get_device_name()}  copy bandwidth {bandwidth / 1e12:.2f} TB/s")
    print(f"{args.num_requests} requests, {sum(input_lens)} input and {out_tokens} output tokens; "
          f"HBM roofline {floor_s:.2f} s = {out_tokens / floor_s:,.0f} output tok/s")
    tuned = dict(TUNED, max_running_requests=args.num_requests)
    modes = [("LLM defaults", {}), ("tuned", tuned)]
    if args.compare_no_overlap:
        modes.append(("tuned, no overlap", dict(tuned, overlap_schedule=False)))
    # A B B A: whatever drifts over the run (clocks, the allocator) weighs on every mode alike
    order = [*modes, *reversed(modes)]
    times: dict[str, list[float]] = {name: [] for name, _ in modes}
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = make_shape_dir(args.shape, Path(tmp) / args.shape)
        for name, settings in order:
            print(f"  {name}", flush=True)
            elapsed = run_once(model_dir, prompts, output_lens, settings)
            times[name].append(elapsed)
            print(f"  {name}: {elapsed:.2f} s", flush=True)
    print(f"\n{'mode':<22}{'seconds':>16}{'out tok/s':>12}{'% roofline':>12}")
    for name, runs in times.items():
        mean = statistics.mean(runs)
        each = " / ".join(f"{t:.2f}" for t in runs)
        print(f"{name:<22}{each:>16}{out_tokens / mean:>12,.0f}{100 * floor_s / mean:>11.1f}%")

if __name__ == "__main__":
    main()
