"""Tensor, data and pipeline parallelism, measured (chapters 12 and 13):
single-request TPOT and full-load throughput by tp size, DP = N against TP = N on the same
workload, PP = N against TP = N (throughput, TTFT, TPOT), and the share of a decode step spent in
collectives, with NCCL or the symmetric-memory all-reduce. Random weights (`--load-format dummy`:
the same model at every tp size) on a config-only shape, token-id prompts, every request `ignore_eos`,
and no prefix cache (a prompt sent again is computed again: each timed run does the warm-up's work).
Layouts run one after another, not in turns (each is its own set of processes and devices).

    python benchmark/parallel_scaling.py tpot --tp 1 2                       # CPU, llama-125m, fp32
    python benchmark/parallel_scaling.py throughput --layouts 1x1 2x1 1x2    # TPxDP: tp 2 vs dp 2
    python benchmark/parallel_scaling.py comm --tp 2 --batch-sizes 1 16      # collectives' share
    python benchmark/parallel_scaling.py pipeline --layouts 2x1 1x2          # TPxPP: tp 2 vs pp 2
    python benchmark/parallel_scaling.py tpot --device cuda --dtype bfloat16 --shape llama-3.1-8b --tp 1 2
    python benchmark/parallel_scaling.py tpot --device cuda --dtype bfloat16 --shape llama-3.1-8b --tp 2 \
        --backends pynccl symm --batch-sizes 1 16 64                         # NCCL vs symmetric memory

- tpot: one request (or `--batch-sizes` requests at once); the time of a 1-token run is taken from
  the time of a `--new-tokens` run, and the rest divided by the tokens after the first: the decode
  step time. Median of `--repeats`. With `--backends`, once per tp communicator.
- throughput: `--requests` prompts of `--prompt-len` random ids, `--new-tokens` each, all submitted
  at once; output tokens per second of wall time, the median of `--repeats` runs after an untimed
  one of the same.
- pipeline: `--layouts` TPxPP on the same number of ranks; per layout the single-request TTFT and
  TPOT (as tpot) and the full-load throughput (as throughput). Pipeline stages decode without CUDA
  graphs: `--eager` runs every layout so, for a like-for-like comparison.
- comm: the communication counter (`comm_stats_dir`) on; its decode time in collectives over the
  decode forward time, on rank 0, once per `--backends` entry. Counting runs decode without CUDA
  graphs, and a collective's time includes waiting for the slowest rank to arrive.

Every row is printed; `--out FILE` also writes it to a CSV whose rows are keyed by (experiment,
hardware, shape, dtype, tp, dp, pp, backend, batch, metric): a new run replaces its own rows and
keeps the others (the chapters' data files hold CPU and GPU rows side by side).
"""

from __future__ import annotations

import argparse
import csv
import gc
import json
import statistics
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from measure import hardware_label, prompts, timed

from minisgl import LLM, SamplingParams
from minisgl.testing.shapes import SHAPES, make_shape_dir

FIELDS = ["experiment", "hardware", "shape", "dtype", "tp", "dp", "pp", "backend", "batch", "metric", "value"]
KEY = FIELDS[:-1]
DEFAULTS = {"pp": "1", "backend": "auto"}  # what rows written before these columns existed ran with


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.model_dir = make_shape_dir(args.shape, Path(tempfile.mkdtemp(prefix="minisgl-shape-")) / args.shape)
        self.vocab = SHAPES[args.shape]["vocab_size"]
        self.hardware = args.hardware or hardware_label(args.device)
        self.rows: list[dict] = []

    @contextmanager
    def llm(self, tp: int = 1, dp: int = 1, pp: int = 1, backend: str = "auto", **extra) -> Iterator[LLM]:
        """An engine of `tp` x `pp` ranks (x `dp` replicas) on the shape's random weights, its tp
        collectives on `backend`; afterwards, on CUDA, this process's cached GPU memory is released (a
        tp = 1 engine runs in this process, and the next engine sizes its KV cache from the free
        memory it finds)."""
        a = self.args
        if a.device == "cpu":
            extra["cpu_threads"] = 1  # a core per rank, as a GPU per rank: tp 2 or dp 2 use twice the cores of tp 1
        if a.eager:
            extra["cuda_graph_max_bs"] = 0
        # cache="naive": a prompt sent again is computed again, so the warm-up and every timed run of
        # a workload do the same work (with the radix cache the timed runs would skip their prefill)
        llm = LLM(self.model_dir, tp_size=tp, dp_size=dp, pp_size=pp, device=a.device, dtype=a.dtype,
                  load_format="dummy", dist_backend=backend, cache="naive",
                  max_running_requests=max(a.requests, max(a.batch_sizes)), progress=False, **extra)
        try:
            yield llm
        finally:
            llm.shutdown()
            del llm
            if a.device == "cuda":
                gc.collect()
                torch.cuda.empty_cache()

    def row(self, experiment: str, tp: int, dp: int, batch: int, metric: str, value: float, pp: int = 1,
            backend: str = "auto") -> None:
        row = dict(experiment=experiment, hardware=self.hardware, shape=self.args.shape, dtype=self.args.dtype,
                   tp=tp, dp=dp, pp=pp, backend=backend, batch=batch, metric=metric, value=round(value, 6))
        self.rows.append(row)
        print(f"{experiment:10s} tp={tp} dp={dp} pp={pp} {backend:6s} batch={batch:<4d} {metric:22s} {value:12.4f}",
              flush=True)

    def _backends(self, tp: int) -> list[str]:
        return self.args.backends if tp > 1 else ["auto"]  # one rank: no collective to choose

    def _step_times(self, llm: LLM, batch_size: int) -> tuple[float, float]:
        """(median time to the first token, median decode step time) of `batch_size` requests at once."""
        a = self.args
        batch = prompts(batch_size, a.prompt_len, self.vocab)
        one, full = SamplingParams(temperature=0, max_tokens=1, ignore_eos=True), \
            SamplingParams(temperature=0, max_tokens=a.new_tokens, ignore_eos=True)
        llm.generate(batch, full)  # warm-up: every kernel and graph of these shapes
        first, per_token = [], []
        for _ in range(a.repeats):
            first.append(timed(lambda: llm.generate(batch, one)))
            per_token.append((timed(lambda: llm.generate(batch, full)) - first[-1]) / (a.new_tokens - 1))
        return statistics.median(first), statistics.median(per_token)

    def tpot(self) -> None:
        for tp in self.args.tp:
            for backend in self._backends(tp):
                with self.llm(tp, backend=backend) as llm:
                    for batch_size in self.args.batch_sizes:
                        ttft, tpot = self._step_times(llm, batch_size)
                        self.row("tpot", tp, 1, batch_size, "tpot_ms", 1e3 * tpot, backend=backend)
                        self.row("tpot", tp, 1, batch_size, "ttft_ms", 1e3 * ttft, backend=backend)

    def pipeline(self) -> None:
        for layout in self.args.layouts:
            tp, pp = (int(n) for n in layout.split("x"))
            with self.llm(tp, pp=pp) as llm:
                ttft, tpot = self._step_times(llm, 1)
                tok_per_s = self._full_load(llm)
            self.row("pipeline", tp, 1, 1, "ttft_ms", 1e3 * ttft, pp=pp)
            self.row("pipeline", tp, 1, 1, "tpot_ms", 1e3 * tpot, pp=pp)
            self.row("pipeline", tp, 1, self.args.requests, "output_tok_per_s", tok_per_s, pp=pp)

    def throughput(self) -> None:
        for layout in self.args.layouts:
            tp, dp = (int(n) for n in layout.split("x"))
            with self.llm(tp, dp) as llm:
                tok_per_s = self._full_load(llm)
            self.row("throughput", tp, dp, self.args.requests, "output_tok_per_s", tok_per_s)

    def _full_load(self, llm: LLM) -> float:
        """Output tokens per second of `--requests` prompts submitted at once: the median of `--repeats`
        runs after an untimed one of the same."""
        a = self.args
        batch = prompts(a.requests, a.prompt_len, self.vocab)
        params = SamplingParams(temperature=0, max_tokens=a.new_tokens, ignore_eos=True)
        llm.generate(batch, params)  # warm-up: the same shapes (no prefix cache: the same work too)
        return statistics.median(a.requests * a.new_tokens / timed(lambda: llm.generate(batch, params))
                                 for _ in range(a.repeats))

    def comm(self) -> None:
        a = self.args
        params = SamplingParams(temperature=0, max_tokens=a.new_tokens, ignore_eos=True)
        for tp in a.tp:
            for backend in self._backends(tp):
                for batch_size in a.batch_sizes:
                    self._comm_row(tp, backend, batch_size, params)

    def _comm_row(self, tp: int, backend: str, batch_size: int, params: SamplingParams) -> None:
        stats_dir = tempfile.mkdtemp(prefix="minisgl-comm-")
        with self.llm(tp, backend=backend, comm_stats_dir=stats_dir) as llm:
            llm.generate(prompts(batch_size, self.args.prompt_len, self.vocab), params)
        decode = json.loads((Path(stats_dir) / "comm-tp0.json").read_text())["phases"]["decode"]
        steps = decode["forwards"]
        kinds: dict[str, float] = {}
        for c in decode["collectives"]:
            kinds[c["kind"]] = kinds.get(c["kind"], 0.0) + c["seconds"]

        def row(metric: str, value: float) -> None:
            self.row("comm", tp, 1, batch_size, metric, value, backend=backend)

        row("step_ms", 1e3 * decode["seconds"] / steps)
        row("comm_ms", 1e3 * decode["comm_seconds"] / steps)
        row("comm_share", decode["comm_seconds"] / decode["seconds"])
        for kind, seconds in sorted(kinds.items()):
            row(f"{kind}_ms", 1e3 * seconds / steps)
        row("collectives_per_step", sum(c["calls"] for c in decode["collectives"]) / steps)

    def save(self, path: Path) -> None:
        """Merge this run's rows into the CSV at `path`: same key, new value."""
        rows = {}
        if path.is_file():
            with path.open() as f:
                for r in csv.DictReader(f):
                    r = {**DEFAULTS, **{k: v for k, v in r.items() if v is not None}}
                    rows[tuple(r[k] for k in KEY)] = r
        for row in self.rows:
            rows[tuple(str(row[k]) for k in KEY)] = {k: str(v) for k, v in row.items()}
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", newline="") as f:
            writer = csv.DictWriter(f, FIELDS, lineterminator="\n")
            writer.writeheader()
            writer.writerows(sorted(rows.values(), key=lambda r: tuple(r[k] for k in KEY)))
        print(f"wrote {len(self.rows)} rows to {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("experiment", choices=["tpot", "throughput", "comm", "pipeline"])
    parser.add_argument("--shape", default="llama-125m", choices=sorted(SHAPES))
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--tp", type=int, nargs="+", default=[1, 2], help="tp sizes (tpot, comm)")
    parser.add_argument("--layouts", nargs="+", help="TPxDP layouts (throughput; default 1x1 2x1 1x2), "
                        "TPxPP layouts (pipeline; default 2x1 1x2)")
    parser.add_argument("--batch-sizes", type=int, nargs="+", help="decode batch sizes (comm; default 1 16), "
                        "requests at once (tpot; default 1)")
    parser.add_argument("--backends", nargs="+", default=["auto"], choices=["auto", "gloo", "nccl", "pynccl", "symm"],
                        help="tp collectives to compare at tp > 1 (tpot, comm)")
    parser.add_argument("--eager", action="store_true", help="decode without CUDA graphs (as pipeline stages do)")
    parser.add_argument("--requests", type=int, default=16, help="requests of the full-load workload (throughput)")
    parser.add_argument("--prompt-len", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per measurement (their median)")
    parser.add_argument("--hardware", help="label of this machine in the CSV (default: from the device)")
    parser.add_argument("--out", type=Path, help="merge the rows into this CSV")
    args = parser.parse_args()
    if args.layouts is None:
        args.layouts = ["2x1", "1x2"] if args.experiment == "pipeline" else ["1x1", "2x1", "1x2"]
    if args.batch_sizes is None:
        args.batch_sizes = [1] if args.experiment == "tpot" else [1, 16]
    bench = Bench(args)
    getattr(bench, args.experiment)()
    if args.out is not None:
        bench.save(args.out)


if __name__ == "__main__":
    main()
