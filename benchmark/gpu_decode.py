"""Decode step time on a GPU: minisgl (CUDA graphs, and eager) against transformers on the same GPU
and against the HBM floor, for the SmolLM2-135M and Qwen3-0.6B shapes with random weights.

    python benchmark/gpu_decode.py [--batch-sizes 1 64] [--context 128] [--steps 200] [--attention-backend flashinfer]

Columns: "graph step" is one synchronous step (build the batch, replay the CUDA graph, sample,
read the tokens back); "overlap step" is the steady state of the scheduler's loop, which launches
step N+1 before reading step N's tokens; "graph GPU" is the device time of one forward alone, and
"no PDL" the same with programmatic dependent launch switched off (MINISGL_DISABLE_PDL=1).

The floor of one step is (weight bytes + KV bytes read) / copy bandwidth, with the bandwidth
measured in this run (a device-to-device copy, bytes read + bytes written). Each request decodes
from `--context` cached tokens; contexts grow by one token per step, as in real decoding.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch

from minisgl.attention.base import BACKENDS
from minisgl.core import Req, SamplingParams
from minisgl.engine.engine import Engine
from minisgl.scheduler import SchedulerConfig
from minisgl.scheduler.batch import make_decode_batch, make_prefill_batch
from minisgl.testing.shapes import SHAPES, kv_bytes_per_token, make_shape_dir, parameter_bytes

CPU = torch.device("cpu")
ATTENTION_BACKEND = "auto"  # every engine this run builds; main() sets it from --attention-backend


def copy_bandwidth(num_bytes: int = 2 << 30, repeats: int = 20) -> float:
    """Device-to-device copy, bytes read + written per second (median of `repeats`)."""
    src = torch.randn(num_bytes // 4, device="cuda")
    dst = torch.empty_like(src)
    times = []
    for _ in range(repeats + 3):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return 2 * num_bytes / statistics.median(times[3:])


def minisgl_decode(model_dir: Path, batch_size: int, context: int, steps: int,
                   modes: tuple[str, ...] = ("graph", "eager")) -> dict[str, float]:
    """ms per decode step: whole step (batch build + forward + greedy sample, wall clock), and GPU
    time of the forward alone (CUDA events), with CUDA graphs and eagerly; with graphs also the
    overlapped step."""
    config = SchedulerConfig(model_path=model_dir, device="cuda", dtype="bfloat16", load_format="dummy",
                             kv_memory_gb=8.0, max_running_requests=max(batch_size, 1),
                             cuda_graph_max_bs=batch_size, attention_backend=ATTENTION_BACKEND, progress=False)
    engine = Engine(config)
    pool = engine.kv_pool
    generator = torch.Generator().manual_seed(0)
    reqs = []
    for uid in range(batch_size):
        prompt = torch.randint(0, SHAPES_VOCAB[model_dir.name], (context,), generator=generator).tolist()
        req = Req(uid, prompt, SamplingParams(temperature=0), context + 3 * steps + 32)
        req.pages = pool.allocator.allocate(pool.pages_for(req.max_total_len))
        reqs.append(req)
    engine.forward(make_prefill_batch(reqs, [context] * batch_size, pool, CPU))
    for req in reqs:
        req.cached_len = context
        req.output_ids.append(1)

    def step() -> None:
        batch = make_decode_batch(reqs, pool, CPU)
        tokens = engine.forward(batch)
        for req, token in zip(reqs, tokens):
            req.cached_len += 1
            req.output_ids.append(token)

    def overlapped_steps(count: int) -> None:
        """The scheduler's overlap loop: step N+1 is launched with placeholder ids -(row + 1) for
        step N's tokens, which are read back only after that launch."""
        future = None
        for _ in range(count):
            launched = engine.forward_async(make_decode_batch(reqs, pool, CPU))
            for row, req in enumerate(reqs):
                req.cached_len += 1
                req.output_ids.append(-(row + 1))
            if future is not None:
                for req, token in zip(reqs, future.tokens()):
                    req.output_ids[-2] = token
            future = launched
        for req, token in zip(reqs, future.tokens()):
            req.output_ids[-1] = token

    results = {}
    if "graph" in modes:
        overlapped_steps(5)  # warm-up
        torch.cuda.synchronize()
        begin = time.perf_counter()
        overlapped_steps(steps // 2)
        results["overlap_step_ms"] = (time.perf_counter() - begin) / (steps // 2) * 1e3
    for mode in modes:
        runner = engine.graph_runner
        if mode == "eager":
            engine.graph_runner = None
        for _ in range(5):
            step()  # warm-up
        torch.cuda.synchronize()
        begin = time.perf_counter()
        for _ in range(steps // 2):
            step()
        results[f"{mode}_step_ms"] = (time.perf_counter() - begin) / (steps // 2) * 1e3
        # GPU time of the forward alone: events around forward_logits, no host sync inside the loop
        batch = make_decode_batch(reqs, pool, CPU)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        engine.forward_logits(batch)
        start.record()
        for _ in range(20):
            engine.forward_logits(batch)
        end.record()
        end.synchronize()
        results[f"{mode}_gpu_ms"] = start.elapsed_time(end) / 20
        engine.graph_runner = runner
    results["avg_context"] = sum(r.cached_len for r in reqs) / batch_size
    engine.shutdown()
    del engine
    torch.cuda.empty_cache()
    return results


def transformers_decode(model_dir: Path, batch_size: int, context: int, steps: int) -> float:
    """ms per decode step of transformers (bf16, its default attention, dynamic KV cache)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(model_dir)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).eval()
    generator = torch.Generator(device="cuda").manual_seed(0)
    ids = torch.randint(0, config.vocab_size, (batch_size, context), device="cuda", generator=generator)
    with torch.inference_mode():
        out = model(ids, use_cache=True)
        past, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
        for i in range(steps + 5):
            if i == 5:
                torch.cuda.synchronize()
                begin = time.perf_counter()
            out = model(token, past_key_values=past, use_cache=True)
            past, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
        torch.cuda.synchronize()
    elapsed = (time.perf_counter() - begin) / steps * 1e3
    del model, past, out
    torch.cuda.empty_cache()
    return elapsed


SHAPES_VOCAB = {name: shape["vocab_size"] for name, shape in SHAPES.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", nargs="+", default=["smollm2-135m", "qwen3-0.6b"], choices=sorted(SHAPES))
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[1, 64])
    parser.add_argument("--context", type=int, default=128, help="cached tokens per request at the start")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--skip-transformers", action="store_true")
    parser.add_argument("--attention-backend", "--attn", default="auto", choices=list(BACKENDS),
                        help="minisgl's attention backend (compare triton with flashinfer)")
    args = parser.parse_args()
    global ATTENTION_BACKEND
    ATTENTION_BACKEND = args.attention_backend

    bandwidth = copy_bandwidth()
    print(f"GPU: {torch.cuda.get_device_name()}  measured copy bandwidth: {bandwidth / 1e12:.2f} TB/s")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for shape in args.shapes:
            model_dir = make_shape_dir(shape, Path(tmp) / shape)
            for bs in args.batch_sizes:
                ours = minisgl_decode(model_dir, bs, args.context, args.steps)
                os.environ["MINISGL_DISABLE_PDL"] = "1"
                ours["no_pdl_gpu_ms"] = minisgl_decode(model_dir, bs, args.context, 20, ("graph",))["graph_gpu_ms"]
                del os.environ["MINISGL_DISABLE_PDL"]
                hf = float("nan") if args.skip_transformers else transformers_decode(model_dir, bs, args.context, 50)
                floor_bytes = parameter_bytes(shape) + bs * ours["avg_context"] * kv_bytes_per_token(shape)
                floor_ms = floor_bytes / bandwidth * 1e3
                rows.append((shape, bs, ours, hf, floor_ms))
                print(f"  {shape} B={bs}: {ours}, transformers {hf:.3f} ms, floor {floor_ms:.4f} ms", flush=True)

    header = (f"{'shape':<14}{'B':>4}{'graph step':>12}{'overlap step':>14}{'graph GPU':>11}{'no PDL':>8}"
              f"{'eager step':>12}{'HF step':>10}{'floor':>9}{'HF/ours':>9}{'ours/floor':>11}{'eager/graph':>12}")
    print("\nms per decode step (context %d + steps); ratios use the overlapped step" % args.context)
    print(header)
    for shape, bs, ours, hf, floor_ms in rows:
        step = ours["overlap_step_ms"]
        print(f"{shape:<14}{bs:>4}{ours['graph_step_ms']:>12.3f}{step:>14.3f}{ours['graph_gpu_ms']:>11.3f}"
              f"{ours['no_pdl_gpu_ms']:>8.3f}{ours['eager_step_ms']:>12.3f}{hf:>10.2f}{floor_ms:>9.4f}"
              f"{hf / step:>9.1f}x{step / floor_ms:>10.1f}x{ours['eager_step_ms'] / ours['graph_step_ms']:>11.1f}x")


if __name__ == "__main__":
    main()
