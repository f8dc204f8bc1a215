"""How far apart two correct results of the same computation may be, for the tests that compare a
sharded, batched or fused computation with a plain one (chapters 01, 07, 10 and 14).

Each output element is a sum of k products. Changing only the order of the additions (shards
summed by an all-reduce, another kernel's blocking, FMA or not, AVX2 vs AVX-512) moves a sum
accumulated with unit roundoff u = eps / 2 by at most gamma_k * sum(|a_i * b_i|), with
gamma_k = k * u / (1 - k * u) (Higham, "Accuracy and Stability of Numerical Algorithms", §3.1).
Every kernel here accumulates in fp32 (fp64 for fp64 inputs), also for bf16 inputs; rounding a
result to a narrower dtype moves it by at most u_dtype of itself. Two such computations are at most
twice as far apart as one is from the exact value.

The bounds are computed from the operands and from the exact (fp64) result itself, element by
element, so they scale with the output: a wrong answer (zeros, a wrong shard or expert, a scaled or
transposed result) lands far outside them, and `tests/test_tolerance.py` checks that it does.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

SILU_SLOPE = 1.1  # max |SiLU'(g)| = 1.0998 (at g = 2.4): SiLU moves an error in g by at most this factor


def unit_roundoff(dtype: torch.dtype) -> float:
    return torch.finfo(dtype).eps / 2


def accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    """What the kernels sum in: fp64 for fp64, else fp32 (bf16 and fp16 matmuls accumulate in fp32)."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def gamma(k: int, dtype: torch.dtype) -> float:
    """Higham's gamma_k for sums of k terms accumulated in `dtype`'s accumulation dtype."""
    u = unit_roundoff(accumulation_dtype(dtype))
    if k * u >= 1:
        raise ValueError(f"a sum of {k} terms is too long for a rounding bound in {dtype}; split the reduction")
    return k * u / (1 - k * u)


def output_roundoff(dtype: torch.dtype) -> float:
    """The unit roundoff of storing a result in `dtype`, beyond the accumulation's own (0 when they match)."""
    return 0.0 if dtype in (torch.float32, torch.float64) else unit_roundoff(dtype)


def matmul_tolerance(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None,
                     dtype: torch.dtype | None = None) -> dict[str, float]:
    """`assert_close` keyword arguments for comparing two computations of `a @ b.T (+ bias)` in
    `dtype` (default: `a`'s): a [..., k], b [n, k], bias [n]."""
    dtype = dtype or a.dtype
    terms = a.abs().double() @ b.abs().double().t()  # [..., n]: sum(|a_i * b_i|) of every output
    k = a.shape[-1]
    if bias is not None:
        terms = terms + bias.abs().double()
        k += 1
    u_out = output_roundoff(dtype)
    return {"rtol": 2 * u_out / (1 - u_out), "atol": 2 * gamma(k, dtype) * terms.max().item()}


def rope_bound(x: torch.Tensor, cos_sin: torch.Tensor, dtype: torch.dtype, input_units: int = 0) -> torch.Tensor:
    """[..., heads, d]: how far two computations of the rotate-half RoPE of x [..., heads, d] at the
    angles cos_sin [..., 1, d] ([cos | sin] of each row's position) in `dtype` may be apart, element by
    element, when x's elements may already be `input_units` units of dtype apart (2 after a per-head
    RMSNorm, which rounds before and after its scale). Output d sums |x_d| |cos| + |x_pair| |sin|
    (its magnitude m): the inputs move it by 2 u input_units m, the fp32 arithmetic by a few fp32
    units of m, and each computation's final rounding by u m."""
    u, u_acc = unit_roundoff(dtype), unit_roundoff(torch.float32)
    cos, sin = cos_sin.double().abs().chunk(2, dim=-1)
    first, second = x.double().abs().chunk(2, dim=-1)
    magnitude = torch.cat([first * cos + second * sin, second * cos + first * sin], dim=-1)
    return (2 * u * input_units + 2 * u + 8 * u_acc) * magnitude


def decode_attention_bound(q: torch.Tensor, q_error: torch.Tensor, keys: torch.Tensor, key_error: torch.Tensor,
                           values: torch.Tensor, out: torch.Tensor, scale: float, dtype: torch.dtype) -> torch.Tensor:
    """[q_heads, d]: how far two computations of one new token's attention in `dtype` may be apart when
    their q [q_heads, d] and keys [n, kv_heads, d] differ element by element by at most q_error and
    key_error (values [n, kv_heads, d] equal; out [q_heads, d] one of the results). A score moves by at
    most delta = scale * (sum |q error| |k| + |q| |k error|); the softmax weights then move by at most
    e^(2 delta) - 1 together, which moves the output by that times max |v|. Rounding the weights to
    dtype for the P @ V product adds u max |v| to each, and the output's rounding u |out|."""
    group = q.shape[0] // keys.shape[1]
    keys, key_error = keys.double().repeat_interleave(group, 1), key_error.double().repeat_interleave(group, 1)
    values = values.double().abs().repeat_interleave(group, 1)  # [n, q_heads, d]
    delta = scale * (torch.einsum("hd,nhd->nh", q_error.double(), keys.abs())
                     + torch.einsum("hd,nhd->nh", q.double().abs(), key_error)).amax(0)  # [q_heads]
    v_max = values.amax(0)  # [q_heads, d]
    u = unit_roundoff(dtype)
    n = keys.shape[0]
    return (torch.expm1(2 * delta)[:, None] + 2 * u + 2 * gamma(n, dtype)) * v_max + 2 * u * out.double().abs()


def expert_mlp_bound(x: torch.Tensor, topk_ids: torch.Tensor, gate_up: torch.Tensor, down: torch.Tensor,
                     dtype: torch.dtype | None = None) -> torch.Tensor:
    """[tokens * k, hidden]: how far apart two computations of the experts' SwiGLU MLPs (chapter 14,
    `expert_outputs`' contract: row token * k + slot is expert topk_ids[token, slot] on x[token]) in
    `dtype` (default: x's) may be, element by element. x [tokens, hidden], topk_ids [tokens, k],
    gate_up [experts, 2 * inter, hidden], down [experts, hidden, inter].

    From each pair's exact gate g, up v and output y (fp64): g and v carry gamma_hidden of their
    magnitudes |x| |w| and, stored in `dtype`, u of themselves; SiLU(g) * v passes an error in g on
    with at most 1.1 |v| and one in v with |SiLU(g)|, and adds two roundings (SiLU, product); the
    down sum carries those errors through |w_down|, adds gamma_inter of its magnitudes, and one
    rounding of y. Two computations are at most twice as far apart."""
    dtype = dtype or x.dtype
    u = output_roundoff(dtype)
    acc_u = unit_roundoff(accumulation_dtype(dtype))
    hidden, inter = x.shape[1], down.shape[2]
    top_k = topk_ids.shape[1]
    experts = topk_ids.reshape(-1)
    bound = torch.zeros(experts.numel(), hidden, dtype=torch.float64, device=x.device)
    for expert in experts.unique().tolist():
        pairs = (experts == expert).nonzero().squeeze(1)
        rows = x[pairs // top_k].double()  # [pairs of this expert, hidden]
        w13, w2 = gate_up[expert].double(), down[expert].double()
        gate_up_exact = rows @ w13.t()  # [pairs, 2 * inter]
        gate_up_error = gamma(hidden, dtype) * (rows.abs() @ w13.abs().t()) + u * gate_up_exact.abs()
        g, v = gate_up_exact.split(inter, dim=1)
        dg, dv = gate_up_error.split(inter, dim=1)
        silu = F.silu(g)
        h_magnitude = (silu.abs() + SILU_SLOPE * dg) * (v.abs() + dv)  # >= |h| as either computation holds it
        dh = SILU_SLOPE * dg * (v.abs() + dv) + silu.abs() * dv + 2 * (u + acc_u) * h_magnitude
        y = (silu * v) @ w2.t()  # [pairs, hidden]
        dy = dh @ w2.abs().t() + gamma(inter, dtype) * (h_magnitude @ w2.abs().t())
        bound[pairs] = 2 * (dy + u * (y.abs() + dy))
    return bound


def assert_within(actual: torch.Tensor, expected: torch.Tensor, bound: torch.Tensor, what: str = "result") -> None:
    """Raise AssertionError unless |actual - expected| <= bound everywhere (shapes must match)."""
    if actual.shape != expected.shape:
        raise AssertionError(f"{what}: shape {tuple(actual.shape)}, expected {tuple(expected.shape)}")
    error = (actual.double() - expected.double()).abs()
    excess = error - bound.to(error.device)
    if not (excess <= 0).all():
        worst = int(excess.argmax())
        index = tuple(int(i) for i in torch.unravel_index(torch.tensor(worst), error.shape))
        raise AssertionError(f"{what}: {int((excess > 0).sum())} of {error.numel()} elements outside the bound; "
                             f"worst at {index}: |difference| {error.flatten()[worst].item():.3e} > bound "
                             f"{bound.flatten()[worst].item():.3e}")


def expert_mlp_wrong_answers(x: torch.Tensor, topk_ids: torch.Tensor, gate_up: torch.Tensor, down: torch.Tensor,
                             compute) -> dict[str, torch.Tensor]:
    """Negative controls for a check of `compute(x, topk_ids, gate_up, down)` (the fused kernel or the
    torch loop): answers of the realistic ways an MoE kernel goes wrong, which the bound must reject."""
    reference = compute(x, topk_ids, gate_up, down)
    inter = down.shape[2]
    wrong = {
        "zeros": torch.zeros_like(reference),
        "scaled 1.5x": 1.5 * reference,
        "tokens sent to the next expert": compute(x, (topk_ids + 1) % gate_up.shape[0], gate_up, down),
        "gate and up swapped": compute(x, topk_ids, torch.cat([gate_up[:, inter:], gate_up[:, :inter]], 1), down),
    }
    if x.shape[0] > 1:
        wrong["rows of the wrong tokens"] = compute(x.flip(0), topk_ids, gate_up, down)
    if down.shape[1] == down.shape[2]:  # hidden == inter: a transposed down weight still has the right shape
        wrong["down transposed"] = compute(x, topk_ids, gate_up, down.transpose(1, 2).contiguous())
    return wrong
