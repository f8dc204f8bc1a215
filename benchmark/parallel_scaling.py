"""Tensor against data parallelism, measured (chapter 12's four open questions): single-request
TPOT and full-load throughput by tp size, DP = N against TP = N on the same workload, and the share
of a decode step spent in collectives. Random weights (`--load-format dummy`: the same model at
every tp size) on a config-only shape, token-id prompts, every request `ignore_eos`.

    python benchmark/parallel_scaling.py tpot --tp 1 2                       # CPU, llama-125m, fp32
    python benchmark/parallel_scaling.py throughput --layouts 1x1 2x1 1x2    # TPxDP: tp 2 vs dp 2
    python benchmark/parallel_scaling.py comm --tp 2 --batch-sizes 1 16      # collectives' share
    python benchmark/parallel_scaling.py tpot --device cuda --dtype bfloat16 --shape llama-3.1-8b --tp 1 2

- tpot: one request; the time of a 1-token run is taken from the time of a `--new-tokens` run, and
  the rest divided by the tokens after the first. Median of `--repeats`.
- throughput: `--requests` prompts of `--prompt-len` random ids, `--new-tokens` each, all submitted
  at once; output tokens per second of wall time, after an untimed warm-up of the same shapes.
- comm: the communication counter (`comm_stats_dir`) on; its decode time in collectives over the
  decode forward time, on rank 0. Counting runs decode without CUDA graphs, and a collective's time
  includes waiting for the slowest rank to arrive.

Every row is printed; `--out FILE` also writes it to a CSV whose rows are keyed by (experiment,
hardware, shape, dtype, tp, dp, batch, metric): a new run replaces its own rows and keeps the others
(chapter 12's data file holds CPU and GPU rows side by side).
"""

from __future__ import annotations

import argparse
import csv
import gc
import json
import os
import random
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from minisgl import LLM, SamplingParams
from minisgl.testing.shapes import SHAPES, make_shape_dir

FIELDS = ["experiment", "hardware", "shape", "dtype", "tp", "dp", "batch", "metric", "value"]
KEY = FIELDS[:-1]


def hardware_label(device: str) -> str:
    """What ran it: `2x NVIDIA H200`, or `cpu, 2 cores (AMD EPYC)`."""
    if device == "cuda":
        return f"{torch.cuda.device_count()}x {torch.cuda.get_device_name(0)}"
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), "unknown CPU") if Path("/proc/cpuinfo").exists() else "unknown CPU"
    return f"cpu, {os.cpu_count()} cores ({model})"


def prompts(count: int, length: int, vocab: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(3, vocab) for _ in range(length)] for _ in range(count)]


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.model_dir = make_shape_dir(args.shape, Path(tempfile.mkdtemp(prefix="minisgl-shape-")) / args.shape)
        self.vocab = SHAPES[args.shape]["vocab_size"]
        self.hardware = args.hardware or hardware_label(args.device)
        self.rows: list[dict] = []

    @contextmanager
    def llm(self, tp: int = 1, dp: int = 1, **extra) -> Iterator[LLM]:
        """An engine of `tp` x `dp` ranks on the shape's random weights; afterwards, on CUDA, this
        process's cached GPU memory is released (a tp = 1 engine runs in this process, and the next
        engine sizes its KV cache from the free memory it finds)."""
        a = self.args
        if a.device == "cpu":
            extra["cpu_threads"] = 1  # a core per rank, as a GPU per rank: tp 2 or dp 2 use twice the cores of tp 1
        llm = LLM(self.model_dir, tp_size=tp, dp_size=dp, device=a.device, dtype=a.dtype, load_format="dummy",
                  max_running_requests=max(a.requests, max(a.batch_sizes)), progress=False, **extra)
        try:
            yield llm
        finally:
            llm.shutdown()
            del llm
            if a.device == "cuda":
                gc.collect()
                torch.cuda.empty_cache()

    def row(self, experiment: str, tp: int, dp: int, batch: int, metric: str, value: float) -> None:
        row = dict(experiment=experiment, hardware=self.hardware, shape=self.args.shape, dtype=self.args.dtype,
                   tp=tp, dp=dp, batch=batch, metric=metric, value=round(value, 6))
        self.rows.append(row)
        print(f"{experiment:10s} tp={tp} dp={dp} batch={batch:<4d} {metric:22s} {value:12.4f}", flush=True)

    def tpot(self) -> None:
        a = self.args
        (prompt,) = prompts(1, a.prompt_len, self.vocab)
        one, full = SamplingParams(temperature=0, max_tokens=1, ignore_eos=True), \
            SamplingParams(temperature=0, max_tokens=a.new_tokens, ignore_eos=True)
        for tp in a.tp:
            with self.llm(tp) as llm:
                llm.generate([prompt], full)  # warm-up: every kernel and graph of these shapes
                first, per_token = [], []
                for _ in range(a.repeats):
                    first.append(_timed(llm, [prompt], one))
                    per_token.append((_timed(llm, [prompt], full) - first[-1]) / (a.new_tokens - 1))
            self.row("tpot", tp, 1, 1, "tpot_ms", 1e3 * statistics.median(per_token))
            self.row("tpot", tp, 1, 1, "ttft_ms", 1e3 * statistics.median(first))

    def throughput(self) -> None:
        a = self.args
        batch = prompts(a.requests, a.prompt_len, self.vocab)
        params = SamplingParams(temperature=0, max_tokens=a.new_tokens, ignore_eos=True)
        for layout in a.layouts:
            tp, dp = (int(n) for n in layout.split("x"))
            with self.llm(tp, dp) as llm:
                llm.generate(batch, params)  # warm-up
                seconds = _timed(llm, batch, params)
            self.row("throughput", tp, dp, a.requests, "output_tok_per_s", a.requests * a.new_tokens / seconds)

    def comm(self) -> None:
        a = self.args
        params = SamplingParams(temperature=0, max_tokens=a.new_tokens, ignore_eos=True)
        for tp in a.tp:
            for batch_size in a.batch_sizes:
                stats_dir = tempfile.mkdtemp(prefix="minisgl-comm-")
                with self.llm(tp, comm_stats_dir=stats_dir) as llm:
                    llm.generate(prompts(batch_size, a.prompt_len, self.vocab), params)
                decode = json.loads((Path(stats_dir) / "comm-tp0.json").read_text())["phases"]["decode"]
                steps = decode["forwards"]
                kinds: dict[str, float] = {}
                for c in decode["collectives"]:
                    kinds[c["kind"]] = kinds.get(c["kind"], 0.0) + c["seconds"]
                self.row("comm", tp, 1, batch_size, "step_ms", 1e3 * decode["seconds"] / steps)
                self.row("comm", tp, 1, batch_size, "comm_ms", 1e3 * decode["comm_seconds"] / steps)
                self.row("comm", tp, 1, batch_size, "comm_share", decode["comm_seconds"] / decode["seconds"])
                for kind, seconds in sorted(kinds.items()):
                    self.row("comm", tp, 1, batch_size, f"{kind}_ms", 1e3 * seconds / steps)
                self.row("comm", tp, 1, batch_size, "collectives_per_step",
                         sum(c["calls"] for c in decode["collectives"]) / steps)

    def save(self, path: Path) -> None:
        """Merge this run's rows into the CSV at `path`: same key, new value."""
        rows = {}
        if path.is_file():
            with path.open() as f:
                rows = {tuple(r[k] for k in KEY): r for r in csv.DictReader(f)}
        for row in self.rows:
            rows[tuple(str(row[k]) for k in KEY)] = {k: str(v) for k, v in row.items()}
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", newline="") as f:
            writer = csv.DictWriter(f, FIELDS, lineterminator="\n")
            writer.writeheader()
            writer.writerows(sorted(rows.values(), key=lambda r: tuple(r[k] for k in KEY)))
        print(f"wrote {len(self.rows)} rows to {path}")


def _timed(llm: LLM, batch: list[list[int]], params: SamplingParams) -> float:
    start = time.perf_counter()
    llm.generate(batch, params)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("experiment", choices=["tpot", "throughput", "comm"])
    parser.add_argument("--shape", default="llama-125m", choices=sorted(SHAPES))
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--tp", type=int, nargs="+", default=[1, 2], help="tp sizes (tpot, comm)")
    parser.add_argument("--layouts", nargs="+", default=["1x1", "2x1", "1x2"], help="TPxDP layouts (throughput)")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 16], help="decode batch sizes (comm)")
    parser.add_argument("--requests", type=int, default=16, help="requests of the full-load workload (throughput)")
    parser.add_argument("--prompt-len", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per tp size (tpot)")
    parser.add_argument("--hardware", help="label of this machine in the CSV (default: from the device)")
    parser.add_argument("--out", type=Path, help="merge the rows into this CSV")
    args = parser.parse_args()
    bench = Bench(args)
    getattr(bench, args.experiment)()
    if args.out is not None:
        bench.save(args.out)


if __name__ == "__main__":
    main()
