"""The radix prefix cache and pages on demand, measured (chapter 11). One run, one engine:

1. multi-turn chat: conversations that share a system prompt; each turn's prompt is the whole
   conversation so far, sent when the previous answer is complete (closed-loop clients);
2. 32 questions over one 2,000-token document, all sent at once;
   both with the cache on (`radix`) and off (`naive`): time to first token, total time, output
   tokens/s, and how many prompt tokens the cache supplied. Greedy tokens must be identical.
3. concurrency: 64 chat requests without max_tokens (so each may run to the context length);
   how many run at once with pages on demand, and with the old admission (pages for the prompt
   plus max_tokens reserved up front, emulated here by the same budget rule with the estimate
   replaced by max_tokens).

    python benchmark/prefix_cache.py                                  # CPU: the embedded SmolLM2
    python benchmark/prefix_cache.py --device cuda --shape qwen3-0.6b # GPU: random weights, that shape

Token ids are random (the cache and the scheduler do not care what they mean); every request
ignores EOS, so both runs do the same work.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time
from pathlib import Path

import torch

from minisgl.core import SamplingParams
from minisgl.engine.engine import Engine
from minisgl.kvcache import RadixCache
from minisgl.message import AbortRequest, GenerateRequest
from minisgl.scheduler import LocalIO, Scheduler, SchedulerConfig
from minisgl.testing.shapes import SHAPES, make_shape_dir

Conversation = list[list[int]]  # the user's turns, as token ids


def tokens(generator: torch.Generator, n: int, vocab: int) -> list[int]:
    return torch.randint(3, vocab, (n,), generator=generator).tolist()


def chat_workload(vocab: int, conversations: int, turns: int, system: int, user: int) -> list[Conversation]:
    generator = torch.Generator().manual_seed(0)
    system_prompt = tokens(generator, system, vocab)
    return [[system_prompt + tokens(generator, user, vocab)]
            + [tokens(generator, user, vocab) for _ in range(turns - 1)] for _ in range(conversations)]


def document_workload(vocab: int, questions: int, doc: int, question: int) -> list[Conversation]:
    generator = torch.Generator().manual_seed(1)
    document = tokens(generator, doc, vocab)
    return [[document + tokens(generator, question, vocab)] for _ in range(questions)]


@dataclasses.dataclass
class Result:
    ttft: list[float]  # seconds from sending each request to its first token
    seconds: float
    output_tokens: int
    prompt_tokens: int
    cached_tokens: int
    answers: list[list[int]]


def run_conversations(scheduler: Scheduler, io: LocalIO, conversations: list[Conversation],
                      max_tokens: int) -> Result:
    """Every conversation starts at once; its next turn is sent when its previous answer is
    complete, as the whole conversation so far plus the new user turn."""
    params = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
    history: list[list[int]] = [[] for _ in conversations]
    next_turn = [0] * len(conversations)
    sent: dict[int, tuple[int, float]] = {}  # uid -> (conversation, when)
    answer: dict[int, list[int]] = {}
    result = Result([], 0.0, 0, 0, 0, [])
    uid = 0

    def send(c: int) -> None:
        nonlocal uid
        history[c] += conversations[c][next_turn[c]]
        next_turn[c] += 1
        io.inbox.append(GenerateRequest(uid, list(history[c]), params))
        sent[uid], answer[uid] = (c, time.perf_counter()), []
        uid += 1

    before = scheduler.stats()
    start = time.perf_counter()
    for c in range(len(conversations)):
        send(c)
    while sent:
        scheduler.step()
        now = time.perf_counter()
        for output in io.outbox:
            c, when = sent[output.uid]
            if not answer[output.uid]:
                result.ttft.append(now - when)
            answer[output.uid] += output.token_ids
            if output.finished:
                del sent[output.uid]
                history[c] += answer[output.uid]
                result.answers.append(answer[output.uid])
                if next_turn[c] < len(conversations[c]):
                    send(c)
        io.outbox.clear()
    result.seconds = time.perf_counter() - start
    after = scheduler.stats()
    result.output_tokens = after.generated_tokens_total - before.generated_tokens_total
    result.prompt_tokens = after.prompt_tokens_total - before.prompt_tokens_total
    result.cached_tokens = after.cached_tokens_total - before.cached_tokens_total
    return result


def fresh_scheduler(config: SchedulerConfig, engine: Engine, cache: str) -> tuple[Scheduler, LocalIO]:
    """A scheduler with its own cache over the shared engine, whose pool is empty again."""
    io = LocalIO()
    return Scheduler(dataclasses.replace(config, cache=cache), engine, io), io


def empty_pool(scheduler: Scheduler) -> None:
    """Give the pages a radix tree still holds back to the allocator (the next run starts cold)."""
    if isinstance(scheduler.cache, RadixCache):
        scheduler.cache.allocator.free(scheduler.cache.tree.evict(scheduler.cache.tree.num_pages))


def compare(name: str, config: SchedulerConfig, engine: Engine, conversations: list[Conversation],
            max_tokens: int) -> None:
    results = {}
    for cache in ("naive", "radix"):
        scheduler, io = fresh_scheduler(config, engine, cache)
        results[cache] = run_conversations(scheduler, io, conversations, max_tokens)
        empty_pool(scheduler)
    same = sorted(map(tuple, results["naive"].answers)) == sorted(map(tuple, results["radix"].answers))
    print(f"\n{name}: {len(results['naive'].ttft)} requests; greedy tokens identical with and without the cache: "
          f"{'yes' if same else 'NO'}")
    print(f"{'cache':<7}{'TTFT mean':>11}{'TTFT p50':>10}{'TTFT p90':>10}{'total s':>9}{'out tok/s':>11}"
          f"{'prompt tok':>12}{'from cache':>12}")
    for cache, r in results.items():
        p90 = statistics.quantiles(r.ttft, n=10)[-1] if len(r.ttft) > 1 else r.ttft[0]
        print(f"{cache:<7}{statistics.mean(r.ttft):>10.3f}s{statistics.median(r.ttft):>9.3f}s{p90:>9.3f}s"
              f"{r.seconds:>9.2f}{r.output_tokens / r.seconds:>11.1f}{r.prompt_tokens:>12}"
              f"{r.cached_tokens / max(1, r.prompt_tokens):>11.0%}")
    naive, radix = results["naive"], results["radix"]
    print(f"radix vs naive: TTFT {statistics.mean(naive.ttft) / statistics.mean(radix.ttft):.1f}x lower, "
          f"throughput {naive.seconds / radix.seconds:.2f}x", flush=True)


def concurrency(config: SchedulerConfig, engine: Engine, num_requests: int, old_admission: bool) -> int:
    """Most requests running at once over a few steps, for max_tokens-less chat requests."""
    scheduler, io = fresh_scheduler(config, engine, "radix")
    if old_admission:  # reserve the request's whole future, as admission did before pages on demand
        pool = engine.kv_pool
        scheduler.kv.reserve = lambda req: max(0, pool.pages_for(req.max_total_len) - len(req.pages))  # type: ignore
    context = engine.model_config.max_position_embeddings
    generator = torch.Generator().manual_seed(2)
    for uid in range(num_requests):
        prompt = tokens(generator, 30, engine.model_config.vocab_size)
        chat = SamplingParams(temperature=0, max_tokens=context - len(prompt), ignore_eos=True)  # as the API sets it
        io.inbox.append(GenerateRequest(uid, prompt, chat))
    most = 0
    for _ in range(4):
        scheduler.step()
        most = max(most, len(scheduler.running) + len(scheduler.prefilling))
    io.inbox.extend(AbortRequest(uid) for uid in range(num_requests))
    scheduler.step()  # takes the aborts: every page is back (or cached)
    empty_pool(scheduler)
    return most


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--model", type=Path, help="checkpoint dir (default: the embedded SmolLM2; --shape for GPU)")
    parser.add_argument("--shape", choices=sorted(SHAPES), help="random weights of this shape (config only)")
    parser.add_argument("--conversations", type=int, default=8)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--questions", type=int, default=32)
    parser.add_argument("--doc-tokens", type=int, default=2000)
    parser.add_argument("--max-tokens", type=int, default=32, help="answer length of every request")
    parser.add_argument("--concurrent", type=int, default=64, help="max_tokens-less requests for part 3")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        if args.shape:
            model_dir, load_format = make_shape_dir(args.shape, Path(tmp) / args.shape), "dummy"
        else:
            from minisgl.models.default_model import ensure_default_model

            model_dir, load_format = args.model or ensure_default_model(), "safetensors"
        config = SchedulerConfig(model_path=model_dir, device=args.device, load_format=load_format, progress=False,
                                 max_running_requests=max(64, args.concurrent))
        engine = Engine(config)
        try:
            vocab = engine.model_config.vocab_size
            pool = engine.kv_pool
            print(f"{model_dir.name} on {args.device} ({engine.dtype}), KV pool {pool.allocator.num_pages} pages "
                  f"of {pool.page_size} token(s)", flush=True)
            warm = chat_workload(vocab, 2, 1, 16, 16)
            run_conversations(*fresh_scheduler(config, engine, "naive"), warm, 4)  # kernels compiled, caches warm
            compare(f"multi-turn chat ({args.conversations} conversations x {args.turns} turns, 200-token system "
                    f"prompt, 40-token turns, {args.max_tokens}-token answers)", config, engine,
                    chat_workload(vocab, args.conversations, args.turns, 200, 40), args.max_tokens)
            compare(f"{args.questions} questions over one {args.doc_tokens}-token document", config, engine,
                    document_workload(vocab, args.questions, args.doc_tokens, 20), args.max_tokens)
            new = concurrency(config, engine, args.concurrent, old_admission=False)
            old = concurrency(config, engine, args.concurrent, old_admission=True)
            print(f"\n{args.concurrent} chat requests without max_tokens (context "
                  f"{engine.model_config.max_position_embeddings}): {new} run at once with pages on demand, "
                  f"{old} with prompt + max_tokens reserved up front")
        finally:
            engine.shutdown()


if __name__ == "__main__":
    main()
