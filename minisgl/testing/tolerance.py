"""How far apart two correct results of the same matmul may be, for the tests that compare a
sharded, batched or fused computation with a plain one (chapters 01 and 07).

Each output element is a sum of k products. Changing only the order of the additions (shards
summed by an all-reduce, another kernel's blocking, FMA or not, AVX2 vs AVX-512) moves a sum
computed in a dtype with unit roundoff u = eps / 2 by at most gamma_k * sum(|a_i * b_i|), with
gamma_k = k * u / (1 - k * u) (Higham, "Accuracy and Stability of Numerical Algorithms", §3.1).
Two such computations are at most twice that apart. The bound depends on the dtype and the
reduction length only, never on this CPU's rounding; a real bug (a wrong shard, a missing bias)
is off by orders of magnitude more.
"""

from __future__ import annotations

import torch


def matmul_tolerance(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None,
                     dtype: torch.dtype | None = None) -> dict[str, float]:
    """`assert_close` keyword arguments for comparing two computations of `a @ b.T (+ bias)` in
    `dtype` (default: `a`'s): a [..., k], b [n, k], bias [n]."""
    terms = a.abs().double() @ b.abs().double().t()  # [..., n]: sum(|a_i * b_i|) of every output
    k = a.shape[-1]
    if bias is not None:
        terms = terms + bias.abs().double()
        k += 1
    u = torch.finfo(dtype or a.dtype).eps / 2
    gamma = k * u / (1 - k * u)
    return {"rtol": 0.0, "atol": 2 * gamma * terms.max().item()}
