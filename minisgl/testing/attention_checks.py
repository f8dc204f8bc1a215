"""Random paged-attention cases that run the Triton backend and the torch reference backend on the
same pool, for the kernel tests: on a GPU for real, on a CPU under TRITON_INTERPRET=1."""

from __future__ import annotations

import dataclasses

import torch

from minisgl.core import Batch, Req, SamplingParams
from minisgl.kvcache import KVCachePool


@dataclasses.dataclass
class CaseResult:
    out_rel_err: float  # ||triton - reference|| / ||reference|| over the attention outputs
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
) -> CaseResult:
    """Request i has prefix_lens[i] cached tokens (random K/V already in the pool) and extend_lens[i]
    new ones; all extend_lens == 1 is a decode batch. The reference is the torch backend in fp32 on
    the same values upcast."""
    from minisgl.attention.torch_backend import TorchAttentionBackend
    from minisgl.attention.triton_backend import TritonAttentionBackend

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
        TritonAttentionBackend(pools[0], device, max_seq_len, len(reqs)),
        TorchAttentionBackend(pools[1]),
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
    """Relative error of each fused elementwise kernel against the layers' torch code in fp32, on
    Qwen3-like shapes (q/k views into one fused qkv tensor, as the attention layer passes them)."""
    import torch.nn.functional as F

    from minisgl.kernel.triton.fused import rms_norm, rope, silu_and_mul
    from minisgl.layers.rotary import RotaryEmbedding, _rotate

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
    table = RotaryEmbedding(head_dim, 512, 10000.0, None)._table(torch.device(device), dtype)

    normed, summed = rms_norm(x, weight, 1e-6, residual)
    ref_sum = x.float() + residual.float()
    cos, sin = table.float()[positions].unsqueeze(1).chunk(2, dim=-1)
    q_rot, k_rot = rope(positions, q, k, table)
    gate, up = gate_up.float().chunk(2, dim=-1)
    return {
        "add": relative_error(summed, ref_sum),
        "rms_norm+residual": relative_error(normed, F.rms_norm(ref_sum, (hidden,), weight.float(), 1e-6)),
        "rms_norm": relative_error(rms_norm(x, weight, 1e-6)[0], F.rms_norm(x.float(), (hidden,), weight.float(), 1e-6)),
        "head_rms_norm": relative_error(rms_norm(q, head_weight, 1e-6)[0],
                                        F.rms_norm(q.float(), (head_dim,), head_weight.float(), 1e-6)),
        "rope_q": relative_error(q_rot, _rotate(q.float(), cos, sin)),
        "rope_k": relative_error(k_rot, _rotate(k.float(), cos, sin)),
        "silu_and_mul": relative_error(silu_and_mul(gate_up), F.silu(gate) * up),
    }
