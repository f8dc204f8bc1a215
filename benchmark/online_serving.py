"""Online serving: streaming completions against a minisgl server at several request rates.

Requests arrive as a Poisson process at each rate (`inf`: all at once). For each rate it reports
time to first token (TTFT), inter-token latency (ITL: the gap between streamed chunks), end-to-end
latency (p50 / p90 / p99) and throughput (requests/s, output tokens/s).

    python benchmark/online_serving.py --launch                          # starts the embedded SmolLM2
    python benchmark/online_serving.py --launch --server-args "--tp-size 3 --dtype float32"
    python benchmark/online_serving.py --base-url http://127.0.0.1:8000 --rates 1 4 16 inf
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shlex
import time
from contextlib import nullcontext
from dataclasses import dataclass, field

import httpx
import numpy as np
from tqdm import tqdm

WORDS = ("the model reads each prompt splits it into tokens and streams new text back while the scheduler "
         "batches requests pages of the key value cache hold what attention needs tensor parallel ranks "
         "share every matrix and sum their partial results").split()


@dataclass
class RequestResult:
    ok: bool
    error: str = ""
    ttft: float = 0.0
    itls: list[float] = field(default_factory=list)
    latency: float = 0.0
    prompt_tokens: int = 0
    output_tokens: int = 0


def make_prompts(count: int, words: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [f"Request {i}: " + " ".join(rng.choice(WORDS) for _ in range(words)) for i in range(count)]


async def one_request(client: httpx.AsyncClient, url: str, model: str, prompt: str, output_len: int) -> RequestResult:
    body = {"model": model, "prompt": prompt, "max_tokens": output_len, "temperature": 0, "ignore_eos": True,
            "stream": True, "stream_options": {"include_usage": True}}
    start = time.perf_counter()
    last = start
    result = RequestResult(ok=False)
    try:
        async with client.stream("POST", url, json=body) as response:
            if response.status_code != 200:
                result.error = f"HTTP {response.status_code}: {(await response.aread())[:200]!r}"
                return result
            async for line in response.aiter_lines():
                if not line.startswith("data: {"):
                    continue
                chunk = json.loads(line[len("data: "):])
                now = time.perf_counter()
                if chunk.get("usage"):
                    result.prompt_tokens = chunk["usage"]["prompt_tokens"]
                    result.output_tokens = chunk["usage"]["completion_tokens"]
                if chunk["choices"] and chunk["choices"][0]["text"]:
                    if result.ttft == 0.0:
                        result.ttft = now - start
                    else:
                        result.itls.append(now - last)
                    last = now
    except httpx.HTTPError as error:
        result.error = f"{type(error).__name__}: {error}"
        return result
    result.latency = time.perf_counter() - start
    result.ok = True
    return result


async def run_rate(base_url: str, model: str, prompts: list[str], output_len: int, rate: float,
                   seed: int) -> tuple[list[RequestResult], float]:
    """Send every prompt, spaced by exponential gaps of mean 1/rate; returns results and wall time."""
    rng = np.random.default_rng(seed)
    url = f"{base_url}/v1/completions"
    limits = httpx.Limits(max_connections=len(prompts), max_keepalive_connections=len(prompts))
    bar = tqdm(total=len(prompts), desc=f"rate {rate:g} req/s", unit="req", leave=False)
    async with httpx.AsyncClient(timeout=httpx.Timeout(600.0), limits=limits) as client:

        async def tracked(prompt: str) -> RequestResult:
            result = await one_request(client, url, model, prompt, output_len)
            bar.update(1)
            return result

        start = time.perf_counter()
        tasks = []
        for prompt in prompts:
            tasks.append(asyncio.create_task(tracked(prompt)))
            if rate != float("inf"):
                await asyncio.sleep(float(rng.exponential(1.0 / rate)))
        results = await asyncio.gather(*tasks)
        elapsed = time.perf_counter() - start
    bar.close()
    return results, elapsed


def percentiles(values: list[float]) -> str:
    if not values:
        return f"{'-':>8} {'-':>8} {'-':>8}"
    p50, p90, p99 = np.percentile(np.asarray(values) * 1000, [50, 90, 99])
    return f"{p50:8.1f} {p90:8.1f} {p99:8.1f}"


def report(rate: float, results: list[RequestResult], elapsed: float) -> dict:
    good = [r for r in results if r.ok]
    output_tokens = sum(r.output_tokens for r in good)
    row = {
        "rate": rate, "requests": len(results), "failed": len(results) - len(good), "seconds": elapsed,
        "req_per_s": len(good) / elapsed, "output_tok_per_s": output_tokens / elapsed,
        "ttft_ms": _pcts([r.ttft for r in good]), "itl_ms": _pcts([i for r in good for i in r.itls]),
        "latency_ms": _pcts([r.latency for r in good]),
    }
    print(f"{rate:>6g} {len(good):>5}/{len(results):<5} {row['req_per_s']:7.2f} {row['output_tok_per_s']:9.1f}  "
          f"{percentiles([r.ttft for r in good])}  {percentiles([i for r in good for i in r.itls])}  "
          f"{percentiles([r.latency for r in good])}")
    for r in results:
        if not r.ok:
            print(f"       failed: {r.error}")
            break
    return row


def _pcts(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    p50, p90, p99 = np.percentile(np.asarray(values) * 1000, [50, 90, 99])
    return {"p50": float(p50), "p90": float(p90), "p99": float(p99)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--base-url", default="http://127.0.0.1:8000", help="a running server")
    where.add_argument("--launch", action="store_true", help="start `python -m minisgl` for the run, stop it after")
    parser.add_argument("--server-args", default="--dtype float32", help="flags for --launch (one string)")
    parser.add_argument("--rates", type=float, nargs="+", default=[1, 2, 4, float("inf")],
                        help="requests/s; inf = all at once")
    parser.add_argument("--num-prompts", type=int, default=32, help="requests per rate")
    parser.add_argument("--input-words", type=int, default=48, help="random words per prompt (~1.2 tokens each)")
    parser.add_argument("--output-len", type=int, default=32, help="tokens generated per request (EOS ignored)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", metavar="PATH", help="also write the results here")
    args = parser.parse_args()

    if args.launch:
        from minisgl.testing.server import RunningServer

        server_context = RunningServer([*shlex.split(args.server_args), "--log-level", "warning"])
    else:
        server_context = nullcontext()
    with server_context as server:
        base_url = server.base_url if server is not None else args.base_url.rstrip("/")
        model = httpx.get(f"{base_url}/v1/models", timeout=30).json()["data"][0]["id"]
        warmup = make_prompts(2, args.input_words, seed=-1)
        asyncio.run(run_rate(base_url, model, warmup, 4, float("inf"), 0))
        prompts = make_prompts(args.num_prompts, args.input_words, args.seed)
        print(f"model {model} at {base_url}: {args.num_prompts} requests per rate, ~{args.input_words} words in, "
              f"{args.output_len} tokens out")
        print(f"{'rate':>6} {'ok':>11} {'req/s':>7} {'out tok/s':>9}  {'TTFT ms p50/p90/p99':>26}  "
              f"{'ITL ms p50/p90/p99':>26}  {'latency ms p50/p90/p99':>26}")
        rows = []
        for rate in args.rates:
            results, elapsed = asyncio.run(run_rate(base_url, model, prompts, args.output_len, rate, args.seed))
            rows.append(report(rate, results, elapsed))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": model, "args": vars(args), "results": rows}, f, indent=2, default=str)


if __name__ == "__main__":
    main()
