"""Next-token sampling: logit bias, frequency / presence penalties, greedy, temperature, top-k,
top-p, with a per-request seeded generator (chapters 05 and 06).

Every rank holds identical full logits after the LM head's all-gather, and every request carries
its own generator seeded identically on every rank, so all ranks draw the same token without
another collective. A request's draws do not depend on which other requests share its batch, nor
on how its prompt was cut into chunks: a middle chunk draws nothing. So a request retracted and
computed again (chapter 11) goes on with the very draws it would have made.

A request whose row cannot be sampled (the model gave non-finite logits) does not stop the rank:
its `failure` is set, identically on every rank, and the scheduler ends that request alone.
"""

from __future__ import annotations

import torch

from minisgl.core import Req
from minisgl.kernel import cpu_kernels, use_cpu_kernels


def sample(logits: torch.Tensor, reqs: list[Req], emits: list[bool]) -> list[int]:
    """logits [num_reqs, vocab] -> one token id per request; rows with `emits[i]` False (a middle
    chunk of a prompt: its token is thrown away) take the argmax without drawing. For a failed
    request the id is unused."""
    logits = logits.float()
    tokens = greedy_tokens(logits).tolist()  # plain greedy answer, used as-is where it applies
    for i, req in enumerate(reqs):
        if not emits[i] or req.sampling.is_plain_greedy:
            continue
        try:
            tokens[i] = _sample_one(logits[i], req)
        except Exception as error:  # one request's row, no collective inside: only this request fails
            req.failure = f"sampling failed: {type(error).__name__}: {error}"
    return tokens


def greedy_tokens(logits: torch.Tensor) -> torch.Tensor:
    """torch.argmax(logits, dim=-1) [num_reqs] int64; for fp32 CPU logits minisgl's C kernel, the
    same picks (first index on a tie) at memory speed: torch's took 3.2 ms of a batch-32 CPU step."""
    if use_cpu_kernels(logits) and logits.dim() == 2:
        return cpu_kernels().argmax_rows(logits)
    return torch.argmax(logits, dim=-1)


def _sample_one(logits: torch.Tensor, req: Req) -> int:
    params = req.sampling
    logits = _adjusted(logits, req)  # [vocab]
    if not torch.isfinite(logits).all():
        raise ValueError("the model produced non-finite logits for this request")
    if params.is_greedy:
        return int(torch.argmax(logits).item())
    # minus the max first: at a small temperature the quotient would overflow to inf otherwise
    logits = (logits - logits.max()) / params.temperature
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


def _adjusted(logits: torch.Tensor, req: Req) -> torch.Tensor:
    """`logits` [vocab] plus the request's logit bias, minus its penalties (OpenAI's definitions):
    logit[t] += bias[t] - frequency_penalty * count[t] - presence_penalty * (count[t] > 0), where
    count[t] is how often t was generated so far (the prompt does not count)."""
    params = req.sampling
    if params.logit_bias:
        ids = torch.tensor(list(params.logit_bias), dtype=torch.int64, device=logits.device)
        bias = torch.tensor(list(params.logit_bias.values()), dtype=logits.dtype, device=logits.device)
        logits = logits.index_add(0, ids, bias)
    if (params.frequency_penalty or params.presence_penalty) and req.output_ids:
        generated = torch.tensor(req.output_ids, dtype=torch.int64, device=logits.device)
        counts = torch.bincount(generated, minlength=logits.shape[-1]).to(logits.dtype)  # [vocab]
        logits = logits - params.frequency_penalty * counts - params.presence_penalty * (counts > 0).to(logits.dtype)
    return logits
