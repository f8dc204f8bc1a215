"""Random paged-attention cases that run a backend under test (Triton, or FlashInfer on a GPU) and
the torch reference backend on the same pool, for the kernel tests: on a GPU for real, on a CPU
under TRITON_INTERPRET=1."""

from __future__ import annotations

import dataclasses

import torch

from minisgl.core import Batch, Req, SamplingParams
from minisgl.kvcache import KVCachePool


@dataclasses.dataclass
class CaseResult:
    out_rel_err: float  # ||tested - reference|| / ||reference|| over the attention outputs
    kv_equal: bool  # both backends stored the new K/V into identical pools (up to the upcast)
    finite: bool


def relative_error(x: torch.Tensor, ref: torch.Tensor) -> float:
    x, ref = x.double(), ref.double()
    return float((x - ref).norm() / ref.norm().clamp_min(1e-30))


def run_attention_case(
    device: torch.device | str,
    dtype: torch.dtype,
    num_q_heads: int,
    num_kv_heads: int,
    head_dim: int,
    prefix_lens: list[int],
    extend_lens: list[int],
    page_size: int = 1,
    seed: int = 0,
    backend: str = "triton",
) -> CaseResult:
    """Request i has prefix_lens[i] cached tokens (random K/V already in the pool) and extend_lens[i]
    new ones; all extend_lens == 1 is a decode batch. `backend` ("triton" or "flashinfer") runs in
    `dtype`; the reference is the torch backend in fp32 on the same values upcast."""
    from minisgl.attention.base import create_attention_backend
    from minisgl.attention.torch_backend import TorchAttentionBackend

    device = torch.device(device)
    gen = torch.Generator().manual_seed(seed)
    pool_pages = [-(-(p + e) // page_size) for p, e in zip(prefix_lens, extend_lens)]
    num_pages = sum(pool_pages) + 3  # page 0 reserved, plus spares so page ids are not contiguous
    num_layers, layer = 2, 1
    pools = [KVCachePool(num_layers, num_pages, page_size, num_kv_heads, head_dim, t, device)
             for t in (dtype, torch.float32)]
    k_init = torch.randn(pools[0].k_buffer.shape, generator=gen).to(dtype)
    v_init = torch.randn(pools[0].v_buffer.shape, generator=gen).to(dtype)
    for pool in pools:
        pool.k_buffer.copy_(k_init)
        pool.v_buffer.copy_(v_init)

    page_ids = (torch.randperm(num_pages - 1, generator=gen) + 1).tolist()  # shuffled, never page 0
    reqs, slots, positions = [], [], []
    for uid, (prefix, extend, pages) in enumerate(zip(prefix_lens, extend_lens, pool_pages)):
        req = Req(uid, [0] * (prefix + extend), SamplingParams(temperature=0), prefix + extend)
        req.pages, page_ids = page_ids[:pages], page_ids[pages:]
        req.cached_len = prefix
        reqs.append(req)
        slots += pools[0].slots(req.pages, prefix, prefix + extend)
        positions += range(prefix, prefix + extend)
    num_tokens = sum(extend_lens)
    batch = Batch(
        phase="decode" if all(e == 1 for e in extend_lens) else "prefill",
        reqs=reqs,
        input_ids=torch.zeros(num_tokens, dtype=torch.int64, device=device),
        positions=torch.tensor(positions, dtype=torch.int64, device=device),
        out_slots=torch.tensor(slots, dtype=torch.int64, device=device),
        prefix_lens=list(prefix_lens),
        extend_lens=list(extend_lens),
        last_indices=(torch.tensor(extend_lens).cumsum(0) - 1).to(device),
    )
    q = torch.randn(num_tokens, num_q_heads, head_dim, generator=gen).to(dtype).to(device)
    k = torch.randn(num_tokens, num_kv_heads, head_dim, generator=gen).to(dtype).to(device)
    v = torch.randn(num_tokens, num_kv_heads, head_dim, generator=gen).to(dtype).to(device)

    max_seq_len = max(p + e for p, e in zip(prefix_lens, extend_lens))
    backends = [
        create_attention_backend(backend, pools[0], device, max_seq_len, len(reqs), local_q_heads=num_q_heads),
        TorchAttentionBackend(pools[1], max_seq_len),
    ]
    outs = []
    for backend, t in zip(backends, (dtype, torch.float32)):
        own = dataclasses.replace(batch)  # each backend writes its own attn_metadata
        backend.prepare(own)
        outs.append(backend.forward(q.to(t), k.to(t), v.to(t), layer, own).float())
    kv_equal = torch.equal(pools[0].k_buffer.float(), pools[1].k_buffer) and torch.equal(
        pools[0].v_buffer.float(), pools[1].v_buffer
    )
    return CaseResult(relative_error(outs[0], outs[1]), kv_equal, bool(torch.isfinite(outs[0]).all()))


def fused_kernel_errors(device: torch.device | str, dtype: torch.dtype, seed: int = 0) -> dict[str, float]:
    """Relative error of each fused kernel against the layers' torch code in fp32 (fp64 for the
    matmuls), on Qwen3-like shapes (q/k views into one fused qkv tensor, as the attention layer
    passes them; a weight wider than one 2048-column tile for the small-batch linear kernel)."""
    import torch.nn.functional as F

    from minisgl.kernel.triton.fused import rms_norm, rope, silu_and_mul
    from minisgl.kernel.triton.linear import small_batch_linear
    from minisgl.layers.kernels import rotate_half
    from minisgl.layers.rotary import RotaryEmbedding

    gen = torch.Generator().manual_seed(seed)
    tokens, hidden, heads, kv_heads, head_dim, inter = 7, 96, 4, 2, 32, 80

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen).to(dtype).to(device)

    x, residual, weight, head_weight = rand(tokens, hidden), rand(tokens, hidden), rand(hidden), rand(head_dim)
    qkv = rand(tokens, (heads + 2 * kv_heads) * head_dim)
    q = qkv[:, : heads * head_dim].view(tokens, heads, head_dim)  # strided views, as in the layer
    k = qkv[:, heads * head_dim : (heads + kv_heads) * head_dim].view(tokens, kv_heads, head_dim)
    gate_up = rand(tokens, 2 * inter)
    positions = torch.tensor([0, 1, 5, 9, 100, 511, 3], device=device)
    table = RotaryEmbedding(head_dim, 512, 10000.0, None).cos_sin(torch.device(device), dtype)

    normed, summed = rms_norm(x, weight, 1e-6, residual)
    ref_sum = x.float() + residual.float()
    cos, sin = table.float()[positions].unsqueeze(1).chunk(2, dim=-1)
    q_rot, k_rot = rope(positions, q, k, table)
    gate, up = gate_up.float().chunk(2, dim=-1)
    rows, wide = 3, 2100  # 3 decode rows; K = 2100 takes two weight tiles
    w_qkv, bias, w_down, w_wide = rand(qkv.shape[1], hidden), rand(qkv.shape[1]), rand(hidden, inter), rand(5, wide)
    x_wide = rand(rows, wide)

    def ref_linear(inp: torch.Tensor, weight: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
        return F.linear(inp.double(), weight.double(), None if b is None else b.double())

    normed_then_qkv, summed_rows = small_batch_linear(x[:rows], w_qkv, bias, "rms_norm", weight, 1e-6, residual[:rows])
    ref_normed_rows = F.rms_norm(ref_sum[:rows], (hidden,), weight.float(), 1e-6)
    return {
        "linear": relative_error(small_batch_linear(x_wide, w_wide)[0], ref_linear(x_wide, w_wide)),
        "linear+bias": relative_error(small_batch_linear(x[:1], w_qkv, bias)[0], ref_linear(x[:1], w_qkv, bias)),
        "rms_norm+linear": relative_error(normed_then_qkv, ref_linear(ref_normed_rows, w_qkv, bias)),
        "rms_norm+linear residual": relative_error(summed_rows, ref_sum[:rows]),
        "silu_and_mul+linear": relative_error(small_batch_linear(gate_up[:rows], w_down, None, "silu_and_mul")[0],
                                              ref_linear((F.silu(gate) * up)[:rows], w_down)),
        "add": relative_error(summed, ref_sum),
        "rms_norm+residual": relative_error(normed, F.rms_norm(ref_sum, (hidden,), weight.float(), 1e-6)),
        "rms_norm": relative_error(rms_norm(x, weight, 1e-6)[0],
                                   F.rms_norm(x.float(), (hidden,), weight.float(), 1e-6)),
        "head_rms_norm": relative_error(rms_norm(q, head_weight, 1e-6)[0],
                                        F.rms_norm(q.float(), (head_dim,), head_weight.float(), 1e-6)),
        "rope_q": relative_error(q_rot, rotate_half(q.float(), cos, sin)),
        "rope_k": relative_error(k_rot, rotate_half(k.float(), cos, sin)),
        "silu_and_mul": relative_error(silu_and_mul(gate_up), F.silu(gate) * up),
    }


ROPE_MISTAKES = ("position + 1", "no q/k norm", "k rotated twice")  # negative controls of rope_decode_excess


def rope_decode_excess(device: torch.device | str, dtype: torch.dtype, num_q_heads: int, num_kv_heads: int,
                       head_dim: int, prefix_lens: list[int], qk_norm: bool, page_size: int = 1, seed: int = 0,
                       mistake: str | None = None) -> float:
    """The Triton backend's `forward_rope` (q/k norms and RoPE inside the decode kernel) against the
    unfused path on the same pool (the kernel table's `rms_norm` and `rope`, then `forward`): the
    largest |fused - unfused| / bound over the attention output and the stored new K, bounds from
    `minisgl.testing.tolerance`. At most 1 passes. `mistake` (one of ROPE_MISTAKES) makes the fused
    side compute something realistically wrong, which must land above 1."""
    from minisgl.attention.base import create_attention_backend
    from minisgl.kernel.cuda import TritonKernels
    from minisgl.layers.rotary import RotaryEmbedding
    from minisgl.testing.tolerance import decode_attention_bound, rope_bound

    device = torch.device(device)
    gen = torch.Generator().manual_seed(seed)
    num_reqs, layer, eps = len(prefix_lens), 1, 1e-6
    pool_pages = [-(-(p + 1) // page_size) for p in prefix_lens]
    num_pages = sum(pool_pages) + 3
    pools = [KVCachePool(2, num_pages, page_size, num_kv_heads, head_dim, dtype, device) for _ in range(2)]
    k_init = torch.randn(pools[0].k_buffer.shape, generator=gen).to(dtype)
    v_init = torch.randn(pools[0].v_buffer.shape, generator=gen).to(dtype)
    for pool in pools:
        pool.k_buffer.copy_(k_init)
        pool.v_buffer.copy_(v_init)
    page_ids = (torch.randperm(num_pages - 1, generator=gen) + 1).tolist()
    reqs, req_slots = [], []
    for uid, (prefix, pages) in enumerate(zip(prefix_lens, pool_pages)):
        req = Req(uid, [0] * (prefix + 1), SamplingParams(temperature=0), prefix + 1)
        req.pages, page_ids = page_ids[:pages], page_ids[pages:]
        req.cached_len = prefix
        reqs.append(req)
        req_slots.append(pools[0].slots(req.pages, 0, prefix + 1))
    positions = torch.tensor(prefix_lens, dtype=torch.int64, device=device)
    batch = Batch(phase="decode", reqs=reqs, input_ids=torch.zeros(num_reqs, dtype=torch.int64, device=device),
                  positions=positions, out_slots=torch.tensor([s[-1] for s in req_slots], device=device),
                  prefix_lens=list(prefix_lens), extend_lens=[1] * num_reqs,
                  last_indices=torch.arange(num_reqs, device=device))
    # q, k, v: views into one qkv row per token, as the attention layer splits the projection
    qkv = torch.randn(num_reqs, (num_q_heads + 2 * num_kv_heads) * head_dim, generator=gen).to(dtype).to(device)
    q, k, v = qkv.split([num_q_heads * head_dim, num_kv_heads * head_dim, num_kv_heads * head_dim], dim=-1)
    q, k, v = (t.view(num_reqs, -1, head_dim) for t in (q, k, v))
    q_weight, k_weight = (1 + 0.3 * torch.randn(2, head_dim, generator=gen)).to(dtype).to(device)
    cos_sin = RotaryEmbedding(head_dim, max(prefix_lens) + 2, 10000.0, None).cos_sin(device, dtype)

    kernels = TritonKernels()  # the unfused path: norm and RoPE kernels, then the decode kernel
    q_in, k_in = (kernels.rms_norm(q, q_weight, eps)[0], kernels.rms_norm(k, k_weight, eps)[0]) if qk_norm else (q, k)
    q_rot, k_rot = kernels.rope(positions, q_in, k_in, cos_sin)
    backends = [create_attention_backend("triton", pool, device, max(prefix_lens) + 1, num_reqs,
                                         local_q_heads=num_q_heads) for pool in pools]
    for backend in backends:
        backend.prepare(batch)
    unfused = backends[0].forward(q_rot, k_rot, v, layer, batch)
    fused_positions = positions + 1 if mistake == "position + 1" else positions
    norms = (q_weight, k_weight, eps) if qk_norm and mistake != "no q/k norm" else None
    fused_k = k_rot if mistake == "k rotated twice" else k  # the layer's RoPE, then the kernel's
    fused = backends[1].forward_rope(q, fused_k, v, layer, batch, fused_positions, cos_sin, norms)
    assert fused is not None, "the Triton backend takes a decode batch's RoPE into its kernel"

    rows = cos_sin[positions].unsqueeze(1)  # [reqs, 1, d]
    q_error = rope_bound(q_in, rows, dtype, 2 if qk_norm else 0)  # [reqs, q_heads, d]
    k_error = rope_bound(k_in, rows, dtype, 2 if qk_norm else 0)
    slots = batch.out_slots
    stored = pools[1].k_buffer[layer][slots].double() - pools[0].k_buffer[layer][slots].double()
    excess = [_excess(stored, k_error)]
    scale = head_dim**-0.5
    for i, req_slot in enumerate(req_slots):
        keys, values = pools[0].k_buffer[layer][req_slot], pools[0].v_buffer[layer][req_slot]  # [n, kv_heads, d]
        key_error = torch.zeros(keys.shape, dtype=torch.float64, device=device)
        key_error[-1] = k_error[i]  # only the new token's key went through RoPE here
        bound = decode_attention_bound(q_rot[i], q_error[i], keys, key_error, values, unfused[i], scale, dtype)
        excess.append(_excess(fused[i].double() - unfused[i].double(), bound))
    return max(excess)


def _excess(difference: torch.Tensor, bound: torch.Tensor) -> float:
    """max |difference| / bound (0 where both are 0; inf where only the bound is)."""
    difference = difference.abs()
    return torch.where(difference == 0, 0.0, difference / bound).max().item()
