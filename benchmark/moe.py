"""Experts split by intermediate dim (TP) against whole experts per rank (EP), measured (chapter 14):
the decode step time at a few batch sizes, offline throughput, and the bytes each rank hands to
collectives per decode token. Random weights (`--load-format dummy`: the same model for both
splits) on a config-only shape, token-id prompts, every request `ignore_eos`.

    python benchmark/moe.py                                   # CPU: qwen3-moe-small, fp32, tp 2
    python benchmark/moe.py --device cuda --dtype bfloat16 --shape qwen3-30b-a3b --layers 16   # 2 GPUs

- decode: `--batch-sizes` requests of `--prompt-len` tokens each; a step's time is taken from a
  `--new-tokens` run minus a 1-token run, divided by the steps between. Median of `--repeats`.
  EP runs decode without CUDA graphs (its all-to-all is sized on the host each step); TP with them.
- throughput: `--requests` prompts, `--new-tokens` each, all submitted at once, after a warm-up.
- bytes: one decode run with the communication counter on (which runs decode eagerly for both):
  rank 0's bytes per decode token, by kind of collective.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from parallel_scaling import _timed, hardware_label, prompts

from minisgl import LLM, SamplingParams
from minisgl.testing.shapes import SHAPES, make_shape_dir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", default="qwen3-moe-small", choices=[n for n, s in SHAPES.items() if "num_experts" in s])
    parser.add_argument("--layers", type=int, help="decoder layers (default: the shape's); time scales with them")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--tp", type=int, default=2)
    parser.add_argument("--splits", nargs="+", default=["tp", "ep"], choices=["tp", "ep"])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--requests", type=int, default=128, help="requests of the throughput workload")
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    model_dir = make_shape_dir(args.shape, Path(tempfile.mkdtemp(prefix="minisgl-moe-")) / args.shape, args.layers)
    config = json.loads((model_dir / "config.json").read_text())
    vocab = config["vocab_size"]
    print(f"{hardware_label(args.device)}; {args.shape} with {config['num_hidden_layers']} layers, {args.dtype}, "
          f"random weights; tp={args.tp}", flush=True)
    one = SamplingParams(temperature=0, max_tokens=1, ignore_eos=True)
    full = SamplingParams(temperature=0, max_tokens=args.new_tokens, ignore_eos=True)
    max_batch = max(args.requests, *args.batch_sizes)

    def engine(split: str, **extra) -> LLM:
        if args.device == "cpu":
            extra["cpu_threads"] = 1  # a core per rank, as a GPU per rank
        return LLM(model_dir, tp_size=args.tp, device=args.device, dtype=args.dtype, load_format="dummy",
                   moe_parallel=split, max_running_requests=max_batch, progress=False, **extra)

    for split in args.splits:
        with engine(split) as llm:
            for batch_size in args.batch_sizes:
                batch = prompts(batch_size, args.prompt_len, vocab, seed=batch_size)
                llm.generate(batch, full)  # warm-up: every kernel and graph of these shapes
                steps = []
                for _ in range(args.repeats):
                    first = _timed(llm, batch, one)
                    steps.append((_timed(llm, batch, full) - first) / (args.new_tokens - 1))
                print(f"moe={split} decode batch={batch_size:<4d} step_ms {1e3 * statistics.median(steps):10.3f}",
                      flush=True)
            workload = prompts(args.requests, args.prompt_len, vocab)
            llm.generate(workload, full)
            seconds = _timed(llm, workload, full)
            print(f"moe={split} throughput requests={args.requests} output_tok_per_s "
                  f"{args.requests * args.new_tokens / seconds:10.1f}", flush=True)
        stats_dir = tempfile.mkdtemp(prefix="minisgl-moe-comm-")
        with engine(split, comm_stats_dir=stats_dir) as llm:
            llm.generate(prompts(args.batch_sizes[-1], args.prompt_len, vocab), full)
        decode = json.loads((Path(stats_dir) / "comm-tp0.json").read_text())["phases"]["decode"]
        by_kind: dict[str, int] = {}
        for c in decode["collectives"]:
            by_kind[c["kind"]] = by_kind.get(c["kind"], 0) + c["bytes"]
        per_token = ", ".join(f"{kind} {nbytes / decode['tokens']:.0f}" for kind, nbytes in sorted(by_kind.items()))
        print(f"moe={split} decode bytes per token (rank 0, batch {args.batch_sizes[-1]}): {per_token}; "
              f"comm share {decode['comm_seconds'] / decode['seconds']:.2f}", flush=True)


if __name__ == "__main__":
    main()
