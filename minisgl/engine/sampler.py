"""Next-token sampling: greedy, temperature, top-k, top-p, with a per-request seeded generator
(chapters 05 and 06).

Every rank holds identical full logits after the LM head's all-gather, and every request carries
its own generator seeded identically on every rank, so all ranks draw the same token without
another collective. A request's draws do not depend on which other requests share its batch, nor
on how its prompt was cut into chunks: a middle chunk draws nothing. So a request retracted and
computed again (chapter 11) goes on with the very draws it would have made.
"""

from __future__ import annotations

import torch

from minisgl.core import Req


def sample(logits: torch.Tensor, reqs: list[Req], emits: list[bool]) -> list[int]:
    """logits [num_reqs, vocab] -> one token id per request; rows with `emits[i]` False (a middle
    chunk of a prompt: its token is thrown away) take the argmax without drawing."""
    logits = logits.float()
    tokens = torch.argmax(logits, dim=-1).tolist()  # greedy answer, used as-is for greedy requests
    for i, req in enumerate(reqs):
        if emits[i] and not req.sampling.is_greedy:
            tokens[i] = _sample_one(logits[i], req)
    return tokens


def _sample_one(logits: torch.Tensor, req: Req) -> int:
    params = req.sampling
    logits = logits / params.temperature  # [vocab]
    if 0 < params.top_k < logits.shape[-1]:
        kth_largest = torch.topk(logits, params.top_k).values[-1]
        logits = logits.masked_fill(logits < kth_largest, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if params.top_p < 1.0:
        sorted_probs, order = torch.sort(probs, descending=True)
        # keep the smallest prefix whose mass reaches top_p (always at least the top token)
        outside = torch.cumsum(sorted_probs, dim=-1) - sorted_probs >= params.top_p
        sorted_probs = sorted_probs.masked_fill(outside, 0.0)
        probs = torch.zeros_like(probs).scatter_(-1, order, sorted_probs)
    return int(torch.multinomial(probs.cpu(), 1, generator=req.generator).item())


def make_generator(seed: int) -> torch.Generator:
    generator = torch.Generator(device="cpu")
    generator.manual_seed(seed)
    return generator
