"""Experts split by intermediate dim (TP) against whole experts per rank (EP), measured (chapter 14):
the decode step time at a few batch sizes, offline throughput, and the bytes each rank hands to
collectives per decode token. Random weights (`--load-format dummy`: the same model for both
splits) on a config-only shape, token-id prompts, every request `ignore_eos`.

    python benchmark/moe.py                                   # CPU: qwen3-moe-small, fp32, tp 2
    python benchmark/moe.py --device cuda --dtype bfloat16 --shape qwen3-30b-a3b --layers 16 \\
        --out chapters/14-experts-across-ranks/data/moe-gpu.json                        # 2 GPUs

Both splits run as two `LLM`s alive side by side, without the prefix cache (`cache="naive"`: a
prompt sent again is computed again, so every run of a workload does the same work, and the
untimed first run of it compiles every kernel variant and captures every graph the timed runs
use). Then the two take turns, ABBA, for `--rounds` rounds; quoted is the median of the rounds,
with the smallest and largest beside it.

- decode: `--batch-sizes` requests of `--prompt-len` tokens each; a step's time is a
  `--new-tokens` run minus a 1-token run (the same prefill), divided by the steps between.
  EP runs decode without CUDA graphs (its all-to-all is sized on the host each step); TP with them.
- throughput: `--requests` prompts, `--new-tokens` each, all submitted at once: output tokens
  (as counted in the outputs) over the wall time, prefill included.
- bytes: one decode run per split with the communication counter on (which runs decode eagerly for
  both): rank 0's bytes per decode token, by kind of collective, and the share of time in them.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from measure import abba, hardware_label, prompts, save_record, spread, timed

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
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds per split, in ABBA order")
    parser.add_argument("--kv-memory-gb", type=float, help="KV pool per rank of each engine (default: 8 on cuda, "
                        "where the two share the GPUs; the engine's default on cpu)")
    parser.add_argument("--out", type=Path, help="write the results, command, machine and date to this JSON file")
    args = parser.parse_args()

    model_dir = make_shape_dir(args.shape, Path(tempfile.mkdtemp(prefix="minisgl-moe-")) / args.shape, args.layers)
    config = json.loads((model_dir / "config.json").read_text())
    vocab = config["vocab_size"]
    print(f"{hardware_label(args.device)}; {args.shape} with {config['num_hidden_layers']} layers, {args.dtype}, "
          f"random weights; tp={args.tp}", flush=True)
    kv_gb = args.kv_memory_gb if args.kv_memory_gb is not None else (8.0 if args.device == "cuda" else None)
    one = SamplingParams(temperature=0, max_tokens=1, ignore_eos=True)
    full = SamplingParams(temperature=0, max_tokens=args.new_tokens, ignore_eos=True)
    batches = {size: prompts(size, args.prompt_len, vocab, seed=size) for size in args.batch_sizes}
    workload = prompts(args.requests, args.prompt_len, vocab)

    def engine(split: str, **extra) -> LLM:
        if args.device == "cpu":
            extra["cpu_threads"] = 1  # a core per rank, as a GPU per rank
        return LLM(model_dir, tp_size=args.tp, device=args.device, dtype=args.dtype, load_format="dummy",
                   moe_parallel=split, cache="naive", kv_memory_gb=kv_gb,
                   max_running_requests=max(args.requests, *args.batch_sizes), progress=False, **extra)

    def one_round(llm: LLM) -> dict[str, float]:
        """Every batch size's decode step (ms) and the workload's output tokens/s, once."""
        result = {}
        for size, batch in batches.items():
            first = timed(lambda: llm.generate(batch, one))
            decode_s = timed(lambda: llm.generate(batch, full)) - first
            result[f"step_ms_batch_{size}"] = 1e3 * decode_s / (args.new_tokens - 1)
        outputs: list = []
        seconds = timed(lambda: outputs.extend(llm.generate(workload, full)))
        result["output_tok_per_s"] = sum(len(o.token_ids) for o in outputs) / seconds
        return result

    llms = {split: engine(split) for split in args.splits}
    try:
        for llm in llms.values():
            one_round(llm)  # untimed: the whole workload once per split
        rounds: dict[str, list[dict[str, float]]] = {split: [] for split in args.splits}
        for _, split in abba(args.splits, args.rounds):
            rounds[split].append(one_round(llms[split]))
    finally:
        for llm in llms.values():
            llm.shutdown()
    results: dict = {"shape": args.shape, "layers": config["num_hidden_layers"], "dtype": args.dtype,
                     "tp_size": args.tp, "requests": args.requests, "prompt_len": args.prompt_len,
                     "new_tokens": args.new_tokens, "rounds": args.rounds}
    for split, runs in rounds.items():
        results[split] = {metric: spread([run[metric] for run in runs]) for metric in runs[0]}
        for metric, s in results[split].items():
            print(f"moe={split} {metric:22s} {s['median']:10.2f}  ({s['min']:.2f}-{s['max']:.2f}, "
                  f"median of {s['rounds']})", flush=True)

    for split in args.splits:
        stats_dir = tempfile.mkdtemp(prefix="minisgl-moe-comm-")
        with engine(split, comm_stats_dir=stats_dir) as llm:
            llm.generate(batches[args.batch_sizes[-1]], full)
        decode = json.loads((Path(stats_dir) / "comm-tp0.json").read_text())["phases"]["decode"]
        by_kind: dict[str, int] = {}
        for c in decode["collectives"]:
            by_kind[c["kind"]] = by_kind.get(c["kind"], 0) + c["bytes"]
        per_token = {kind: nbytes / decode["tokens"] for kind, nbytes in sorted(by_kind.items())}
        share = decode["comm_seconds"] / decode["seconds"]
        results[split]["decode_bytes_per_token"] = per_token
        results[split]["comm_share"] = share
        shown = ", ".join(f"{kind} {nbytes:.0f}" for kind, nbytes in per_token.items())
        print(f"moe={split} decode bytes per token (rank 0, batch {args.batch_sizes[-1]}): {shown}; "
              f"comm share {share:.2f}", flush=True)
    if args.out:
        save_record(args.out, args.device, results)


if __name__ == "__main__":
    main()
