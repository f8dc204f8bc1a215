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


def expert_mlp_tolerance(x: torch.Tensor, gate_up: torch.Tensor, down: torch.Tensor,
                         dtype: torch.dtype | None = None) -> dict[str, float]:
    """`assert_close` keyword arguments for two computations of the experts' SwiGLU MLPs (chapter 14)
    in `dtype` (default: x's): x [tokens, hidden], gate_up [experts, 2 * inter, hidden], down
    [experts, hidden, inter], fp32 accumulation. The gate and up sums carry gamma_hidden of their
    magnitudes |x| |w|; SiLU(g) * up passes that on with a factor of at most 1.1 per side
    (|SiLU'| <= 1.1, |SiLU(g)| <= |g|); the down sum adds gamma_inter. Rounding to `dtype` costs a unit
    roundoff u each time: at most three on the intermediate (gate, up, their product: the torch loop
    rounds all three, the fused kernel only the product), one on the output. Two computations are
    at most twice as far apart."""
    xa, inter = x.abs().double(), gate_up.shape[1] // 2
    u = torch.finfo(dtype or x.dtype).eps / 2
    acc_u = torch.finfo(torch.float32).eps / 2

    def gamma(k: int) -> float:
        return k * acc_u / (1 - k * acc_u)

    worst = 0.0
    for w13, w2 in zip(gate_up.abs().double(), down.abs().double()):
        gate, up = xa @ w13[:inter].t(), xa @ w13[inter:].t()  # [tokens, inter] magnitudes
        inter_bound = 1.1 * gate * up  # |SiLU(g) * up|
        inter_error = (2.2 * gamma(x.shape[1]) + 3.3 * u) * inter_bound
        out = (inter_bound @ w2.t()) * (gamma(inter) + u) + inter_error @ w2.t()
        worst = max(worst, out.max().item() if out.numel() else 0.0)
    return {"rtol": 0.0, "atol": 2 * worst}
