"""The radix prefix cache and pages on demand, measured (chapter 11):

1. multi-turn chat: conversations that share a system prompt; each turn's prompt is the whole
   conversation so far, sent when the previous answer is complete (closed-loop clients,
   `minisgl.testing.multi_turn.run_chat`, the driver chapter 11's notebook uses);
2. questions over one long document, all sent at once;
   each with the cache on (`radix`) and off (`naive`): time to first token, total time, output
   tokens/s, and how many prompt tokens the cache supplied; greedy tokens compared.
3. concurrency: chat requests without max_tokens (so each may run to the context length): how many
   run at once with pages on demand, and with the old admission (pages for the prompt plus
   max_tokens reserved up front, emulated by the same budget rule with the estimate replaced by
   max_tokens), in the engine's default KV pool.

    python benchmark/prefix_cache.py                                  # CPU: the embedded SmolLM2
    python benchmark/prefix_cache.py --device cuda --shape qwen3-0.6b --out chapters/11-kv-memory/data/prefix_cache.json

Both caches run as two `LLM`s alive side by side. Each runs both workloads once untimed (every
prefill shape the timed runs need compiled, every graph captured), then the two take turns, ABBA,
for `--rounds` rounds; each round draws new token ids (so the radix cache never holds a round's
prompts before it starts, only what the round itself shares). Quoted: the median of the rounds,
the smallest and largest beside it. Every request ignores EOS, so both caches do the same work.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import tempfile
from pathlib import Path

import torch
from measure import abba, save_record, spread

from minisgl import LLM, SamplingParams
from minisgl.message import AbortRequest, GenerateRequest
from minisgl.scheduler import SchedulerConfig
from minisgl.testing.engine_runs import InProcessRun
from minisgl.testing.multi_turn import Conversation, run_chat
from minisgl.testing.shapes import SHAPES, make_shape_dir

CACHES = ("naive", "radix")


def tokens(generator: torch.Generator, n: int, vocab: int) -> list[int]:
    return torch.randint(3, vocab, (n,), generator=generator).tolist()


def chat_workload(vocab: int, seed: int, conversations: int, turns: int, system: int, user: int) -> list[Conversation]:
    generator = torch.Generator().manual_seed(seed)
    system_prompt = tokens(generator, system, vocab)
    return [[system_prompt + tokens(generator, user, vocab)]
            + [tokens(generator, user, vocab) for _ in range(turns - 1)] for _ in range(conversations)]


def document_workload(vocab: int, seed: int, questions: int, doc: int, question: int) -> list[Conversation]:
    generator = torch.Generator().manual_seed(seed)
    document = tokens(generator, doc, vocab)
    return [[document + tokens(generator, question, vocab)] for _ in range(questions)]


def measure(llm: LLM, conversations: list[Conversation], params: SamplingParams) -> dict:
    """One run of a workload: its times, its answers, and the prompt tokens the cache supplied."""
    before = llm.stats()
    run = run_chat(llm, conversations, params)
    after = llm.stats()
    prompt = after.prompt_tokens_total - before.prompt_tokens_total
    return {
        "ttft_mean_s": statistics.mean(run.ttft),
        "ttft_p50_s": statistics.median(run.ttft),
        "total_s": run.seconds,
        "output_tok_per_s": (after.generated_tokens_total - before.generated_tokens_total) / run.seconds,
        "cached_share": (after.cached_tokens_total - before.cached_tokens_total) / max(1, prompt),
        "answers": sorted(map(tuple, run.answers)),
    }


def concurrency(config: SchedulerConfig, num_requests: int, old_admission: bool) -> int:
    """Most requests running at once over a few steps, for max_tokens-less chat requests."""
    run = InProcessRun(config)
    try:
        scheduler = run.scheduler
        if old_admission:  # reserve the request's whole future, as admission did before pages on demand
            pool = run.engine.kv_pool
            scheduler.kv.reserve = (  # type: ignore
                lambda req: max(0, pool.pages_for(req.max_total_len) - len(req.pages)))
        context = run.engine.model_config.max_position_embeddings
        generator = torch.Generator().manual_seed(2)
        for uid in range(num_requests):
            prompt = tokens(generator, 30, run.engine.model_config.vocab_size)
            # no max_tokens: the API lets the request run to the context length
            chat = SamplingParams(temperature=0, max_tokens=context - len(prompt), ignore_eos=True)
            run.io.inbox.append(GenerateRequest(uid, prompt, chat))
        most = 0
        for _ in range(4):
            scheduler.step()
            most = max(most, len(scheduler.running) + len(scheduler.prefilling))
        run.io.inbox.extend(AbortRequest(uid) for uid in range(num_requests))
        scheduler.step()
        return most
    finally:
        run.close()


def release_device_memory(device: str) -> None:
    """An engine that ran in this process leaves cached blocks; the next sizes its pool from what is free."""
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()


def report(name: str, runs: dict[str, list[dict]]) -> dict:
    """Print one workload's table (medians of the rounds, smallest-largest) and return it as data."""
    rounds = len(runs["naive"])
    same = sum(n["answers"] == r["answers"] for n, r in zip(runs["naive"], runs["radix"]))
    print(f"\n{name}: median of {rounds} rounds (smallest-largest); greedy tokens identical with and without the "
          f"cache in {same} of {rounds} rounds")
    print(f"{'cache':<7}{'TTFT mean s':>22}{'total s':>22}{'out tok/s':>24}{'from cache':>12}")
    table: dict = {"rounds": rounds, "identical_rounds": same}
    for cache in CACHES:
        row = {metric: spread([r[metric] for r in runs[cache]])
               for metric in ("ttft_mean_s", "ttft_p50_s", "total_s", "output_tok_per_s", "cached_share")}
        table[cache] = row
        cell = lambda m, f: f"{row[m]['median']:{f}} ({row[m]['min']:{f}}-{row[m]['max']:{f}})"  # noqa: E731
        print(f"{cache:<7}{cell('ttft_mean_s', '.3f'):>22}{cell('total_s', '.2f'):>22}"
              f"{cell('output_tok_per_s', '.0f'):>24}{row['cached_share']['median']:>11.0%}")
    # the ratio within each round (both settings saw the same machine state), then its median
    table["ttft_ratio"] = spread([n["ttft_mean_s"] / r["ttft_mean_s"] for n, r in zip(runs["naive"], runs["radix"])])
    table["throughput_ratio"] = spread([n["total_s"] / r["total_s"] for n, r in zip(runs["naive"], runs["radix"])])
    t, s = table["ttft_ratio"], table["throughput_ratio"]
    print(f"naive / radix, per round: TTFT {t['median']:.2f}x ({t['min']:.2f}-{t['max']:.2f}), "
          f"total time {s['median']:.2f}x ({s['min']:.2f}-{s['max']:.2f})", flush=True)
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--model", type=Path, help="checkpoint dir (default: the embedded SmolLM2; --shape for GPU)")
    parser.add_argument("--shape", choices=sorted(SHAPES), help="random weights of this shape (config only)")
    parser.add_argument("--conversations", type=int, default=8)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--system-tokens", type=int, default=200)
    parser.add_argument("--turn-tokens", type=int, default=40)
    parser.add_argument("--questions", type=int, default=32)
    parser.add_argument("--doc-tokens", type=int, default=2000)
    parser.add_argument("--max-tokens", type=int, default=32, help="answer length of every request")
    parser.add_argument("--concurrent", type=int, default=64, help="max_tokens-less requests for part 3 (0: skip)")
    parser.add_argument("--rounds", type=int, default=4, help="timed rounds per cache, in ABBA order")
    parser.add_argument("--kv-memory-gb", type=float, help="KV pool of each of the two engines (default: 16 on "
                        "cuda, where both share one GPU; the engine's default on cpu)")
    parser.add_argument("--out", type=Path, help="write the results, command, machine and date to this JSON file")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        if args.shape:
            model_dir, load_format = make_shape_dir(args.shape, Path(tmp) / args.shape), "dummy"
        else:
            from minisgl.models.default_model import ensure_default_model

            model_dir, load_format = args.model or ensure_default_model(), "safetensors"
        common = dict(device=args.device, load_format=load_format, progress=False,
                      max_running_requests=max(args.questions, args.conversations))
        kv_gb = args.kv_memory_gb if args.kv_memory_gb is not None else (16.0 if args.device == "cuda" else None)
        params = SamplingParams(temperature=0, max_tokens=args.max_tokens, ignore_eos=True)
        workloads = {
            "chat": lambda vocab, seed: chat_workload(vocab, seed, args.conversations, args.turns,
                                                      args.system_tokens, args.turn_tokens),
            "document": lambda vocab, seed: document_workload(vocab, seed, args.questions, args.doc_tokens, 20),
        }
        results: dict = {"model": args.shape or model_dir.name, "device": args.device, "workloads": {
            "conversations": args.conversations, "turns": args.turns, "system_tokens": args.system_tokens,
            "turn_tokens": args.turn_tokens, "questions": args.questions, "doc_tokens": args.doc_tokens,
            "max_tokens": args.max_tokens}}
        llms = {cache: LLM(model_dir, cache=cache, kv_memory_gb=kv_gb, **common) for cache in CACHES}
        try:
            vocab, context = llms["naive"].model_config.vocab_size, llms["naive"].model_config.max_position_embeddings
            print(f"{results['model']} on {args.device} ({llms['naive'].config.dtype}); two engines, "
                  f"KV pool {kv_gb or 'default'} GB each", flush=True)
            for cache, llm in llms.items():  # the whole workload once per setting: every variant compiled
                for name, make in workloads.items():
                    run_chat(llm, make(vocab, 1000), params)
            runs: dict = {name: {cache: [] for cache in CACHES} for name in workloads}
            for r, cache in abba(CACHES, args.rounds):
                for name, make in workloads.items():
                    runs[name][cache].append(measure(llms[cache], make(vocab, r), params))
        finally:
            for llm in llms.values():
                llm.shutdown()
            del llms
            release_device_memory(args.device)
        results["chat"] = report(f"multi-turn chat ({args.conversations} conversations x {args.turns} turns, "
                                 f"{args.system_tokens}-token system prompt, {args.turn_tokens}-token turns, "
                                 f"{args.max_tokens}-token answers)", runs["chat"])
        results["document"] = report(f"{args.questions} questions over one {args.doc_tokens}-token document, "
                                     f"{args.max_tokens}-token answers", runs["document"])

        if args.concurrent:
            config = SchedulerConfig(model_path=model_dir, **{**common, "max_running_requests": args.concurrent},
                                     cuda_graph_max_bs=0)  # four steps are counted, none timed: no graphs
            new = concurrency(config, args.concurrent, old_admission=False)
            release_device_memory(args.device)
            old = concurrency(config, args.concurrent, old_admission=True)
            release_device_memory(args.device)
            print(f"\n{args.concurrent} chat requests without max_tokens (context {context}): {new} run at once "
                  f"with pages on demand, {old} with prompt + max_tokens reserved up front", flush=True)
            results["concurrency"] = {"requests": args.concurrent, "pages_on_demand": new, "reserved_up_front": old}
        if args.out:
            save_record(args.out, args.device, results)


if __name__ == "__main__":
    main()
