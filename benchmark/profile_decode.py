"""Where a decode step's GPU time goes: torch.profiler over CUDA-graph replays of one decode batch
(SmolLM2 shape, random weights), kernels grouped by name, most time first; and how many kernels a
step and one decoder layer launch (the count the fused decode layer, minisgl/kernel/cuda.py, keeps
down).

    python benchmark/profile_decode.py [--shape smollm2-135m] [--batch-size 1] [--context 338]
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from minisgl.core import Req, SamplingParams, forward_context
from minisgl.engine.engine import Engine
from minisgl.scheduler import SchedulerConfig
from minisgl.scheduler.batch import make_decode_batch, make_prefill_batch
from minisgl.testing.shapes import SHAPES, make_shape_dir

CPU = torch.device("cpu")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", default="smollm2-135m", choices=sorted(SHAPES))
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--context", type=int, default=338)
    parser.add_argument("--replays", type=int, default=20)
    args = parser.parse_args()
    # With programmatic dependent launch a kernel starts early and waits for the one before it, so
    # its profiled duration would include that wait: profile the kernels one after another.
    os.environ["MINISGL_DISABLE_PDL"] = "1"
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = make_shape_dir(args.shape, Path(tmp) / args.shape)
        engine = Engine(SchedulerConfig(model_path=model_dir, device="cuda", dtype="bfloat16", load_format="dummy",
                                        kv_memory_gb=4.0, max_running_requests=args.batch_size,
                                        cuda_graph_max_bs=args.batch_size, progress=False))
    pool = engine.kv_pool
    reqs = []
    for uid in range(args.batch_size):
        req = Req(uid, list(range(3, 3 + args.context)), SamplingParams(temperature=0), args.context + 1)
        req.pages = pool.allocator.allocate(pool.pages_for(req.max_total_len))
        reqs.append(req)
    engine.forward(make_prefill_batch(reqs, [args.context] * args.batch_size, pool, CPU))
    for req in reqs:
        req.cached_len = args.context
        req.output_ids.append(1)
    batch = make_decode_batch(reqs, pool, CPU)
    for _ in range(5):
        engine.forward_logits(batch)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(args.replays):
            engine.forward_logits(batch)
        torch.cuda.synchronize()
    events = device_events(prof)
    total = sum(e.self_device_time_total for e in events)
    layers = len(engine.stage.layers)
    print(f"{args.shape} B={args.batch_size} context {args.context}: "
          f"{total / args.replays / 1e3:.3f} ms of kernels per step, "
          f"{sum(e.count for e in events) / args.replays:.0f} kernels per step, "
          f"{kernels_per_layer(engine, batch)} per decoder layer ({layers} layers)")
    print(f"{'us/step':>9}{'calls/step':>11}{'us/call':>9}  kernel")
    for e in sorted(events, key=lambda e: -e.self_device_time_total)[:18]:
        per_step = e.self_device_time_total / args.replays
        calls = e.count / args.replays
        print(f"{per_step:>9.1f}{calls:>11.1f}{per_step / max(calls, 1e-9):>9.2f}  {e.key[:90]}")
    engine.shutdown()


def device_events(prof: profile) -> list:
    """The profiler's kernels (and copies) that ran on the device, grouped by name."""
    return [e for e in prof.key_averages() if getattr(e, "self_device_time_total", 0) > 0]


def kernels_per_layer(engine: Engine, host_batch) -> int:
    """Kernels one decoder layer launches on this decode batch: layer 1 run once, eagerly, under the
    profiler (a graph replays the launches its capture recorded: the same ones)."""
    batch = make_decode_batch(host_batch.reqs, engine.kv_pool, engine.device)
    engine.attn_backend.prepare(batch)
    layer = engine.model.model.layers[1]
    hidden = torch.randn(batch.size, engine.model_config.hidden_size, dtype=engine.dtype, device=engine.device)
    residual = torch.randn_like(hidden)
    with torch.inference_mode(), forward_context(batch, engine.attn_backend):
        layer.forward(batch.positions, hidden, residual)  # warm: every kernel compiled
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            layer.forward(batch.positions, hidden, residual)
            torch.cuda.synchronize()
    return sum(e.count for e in device_events(prof))


if __name__ == "__main__":
    main()
