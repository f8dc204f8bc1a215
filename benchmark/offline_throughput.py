"""Offline decode throughput: the same prompts through minisgl and through transformers' batched
`generate`, in one run, on this machine. Prints tok/s for both and the ratio.

    python benchmark/offline_throughput.py                      # embedded SmolLM2, batches 1, 16, 32
    python benchmark/offline_throughput.py --batch-sizes 1 32 --new-tokens 64 --tp 1
    python benchmark/offline_throughput.py --until-eos --new-tokens 256   # chat-like: stop at EOS

With `--until-eos` every request stops at its end-of-sequence token and only real tokens count:
transformers' static batch keeps stepping finished rows until the longest is done, minisgl's
continuous batch shrinks as requests finish.
"""

from __future__ import annotations

import argparse
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from minisgl import LLM, SamplingParams
from minisgl.models.default_model import ensure_default_model


def make_prompts(tokenizer, count: int, seed: int) -> list[list[int]]:
    """Chat prompts of varied length, built from a fixed list of questions."""
    topics = ["the moon", "tensor parallelism", "a bicycle", "Paris", "photosynthesis", "the ocean", "prime numbers",
              "coffee", "volcanoes", "the internet", "chess", "rain", "music", "bread", "trains", "the brain"]
    generator = torch.Generator().manual_seed(seed)
    prompts = []
    for i in range(count):
        detail = int(torch.randint(1, 4, (1,), generator=generator))
        question = f"Explain {topics[i % len(topics)]} in {detail * 2} sentences" + " please" * detail + "."
        chat = [{"role": "user", "content": question}]
        text = tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
        prompts.append(tokenizer(text, add_special_tokens=False)["input_ids"])
    return prompts


def run_transformers(model, tokenizer, prompts: list[list[int]], new_tokens: int, until_eos: bool) -> tuple[int, float]:
    """(real tokens generated, seconds) for one batched greedy `generate` (left-padded)."""
    tokenizer.padding_side = "left"
    batch = tokenizer.pad({"input_ids": prompts}, return_tensors="pt")
    eos = model.generation_config.eos_token_id
    eos_ids = set(eos if isinstance(eos, list) else [eos])
    start = time.perf_counter()
    with torch.inference_mode():
        output = model.generate(**batch, max_new_tokens=new_tokens, min_new_tokens=None if until_eos else new_tokens,
                                do_sample=False, pad_token_id=tokenizer.pad_token_id or 0)
    elapsed = time.perf_counter() - start
    if not until_eos:
        return len(prompts) * new_tokens, elapsed
    real = 0
    for row in output[:, batch["input_ids"].shape[1] :].tolist():
        ends = [i for i, token in enumerate(row) if token in eos_ids]
        real += ends[0] + 1 if ends else len(row)  # up to and including the first EOS
    return real, elapsed


def run_minisgl(llm: LLM, prompts: list[list[int]], new_tokens: int, until_eos: bool) -> tuple[int, float]:
    params = SamplingParams(temperature=0, max_tokens=new_tokens, ignore_eos=not until_eos)
    start = time.perf_counter()
    outputs = llm.generate(prompts, params)
    elapsed = time.perf_counter() - start
    return sum(len(o.token_ids) for o in outputs), elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="checkpoint dir (default: the embedded SmolLM2)")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 16, 32])
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--dtype", default="float32", help="both engines use it (fp32: fair on AVX2-only CPUs)")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--until-eos", action="store_true", help="stop each request at EOS (chat-like)")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    model_dir = args.model or ensure_default_model()
    dtype = getattr(torch, args.dtype)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    hf_model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).eval()
    llm = LLM(model_dir, tp_size=args.tp, dtype=args.dtype, progress=False)
    warmup = make_prompts(tokenizer, 2, seed=99)
    run_minisgl(llm, warmup, 4, False)
    run_transformers(hf_model, tokenizer, warmup, 4, False)

    print(f"model {model_dir.name if hasattr(model_dir, 'name') else model_dir}, {args.dtype}, "
          f"{args.threads} threads, tp={args.tp}, "
          + (f"up to {args.new_tokens} tokens, stop at EOS" if args.until_eos
             else f"{args.new_tokens} new tokens per request"))
    print(f"{'batch':>5} {'transformers tok/s':>19} {'minisgl tok/s':>14} {'ratio':>6}")
    for batch_size in args.batch_sizes:
        prompts = make_prompts(tokenizer, batch_size, seed=batch_size)
        hf_tokens, hf_seconds = run_transformers(hf_model, tokenizer, prompts, args.new_tokens, args.until_eos)
        ours_tokens, ours_seconds = run_minisgl(llm, prompts, args.new_tokens, args.until_eos)
        hf_rate, ours_rate = hf_tokens / hf_seconds, ours_tokens / ours_seconds
        print(f"{batch_size:>5} {hf_rate:>19.1f} {ours_rate:>14.1f} {ours_rate / hf_rate:>5.1f}x", flush=True)
    llm.shutdown()


if __name__ == "__main__":
    main()
