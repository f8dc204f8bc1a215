"""The CUDA plug-in's fused decode layer (minisgl/kernel/cuda.py) against the decoder layers' own
forward, on one decode step of a tiny model: for the interpreter test on a CPU and the GPU test
(chapter 10)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from minisgl.core import Req, SamplingParams, forward_context
from minisgl.layers import install_kernels, kernels_for
from minisgl.scheduler.batch import make_decode_batch, make_prefill_batch
from minisgl.testing.tolerance import gamma

if TYPE_CHECKING:
    from minisgl.engine.engine import Engine

LAYER_MISTAKES = ("position + 1", "residual dropped")  # negative controls of fused_layer_excesses


def fused_layer_excesses(engine: Engine, mistakes: Sequence[str | None]) -> dict[str | None, float]:
    """Prefill three prompts with the plain layers, then compute one decode step (3 rows: a batch
    the fused layer takes) with every decoder layer's plain forward, and again with the fused layer
    once per entry of `mistakes` (None: the fused layer as it is; else one of LAYER_MISTAKES, which
    makes it wrong). The engine's attention backend must be Triton's (so RoPE goes into its decode
    kernel). Returns, per entry, the largest |fused - plain| / bound over the logits, at most 1
    passing: the bound allows each layer one sum of the longest reduction in another order in fp32
    (Higham's gamma_k), at the scale of the LM head's terms sum |h_i w_i|. One prefill serves every
    entry (in Triton's CPU interpreter it costs as much as the decode steps): each decode step
    writes its own token's keys and values before it reads them, so no run sees another's."""
    import minisgl.kernel.cuda as cuda_plugin

    layers = [layer for layer in engine.model.model.layers if hasattr(layer, "self_attn")]
    installed = [vars(layer).get("forward") for layer in layers]  # the engine's fused layers on CUDA
    fused = [forward or cuda_plugin.FusedDecodeLayer(layer) for layer, forward in zip(layers, installed)]
    assert all(isinstance(f, cuda_plugin.FusedDecodeLayer) for f in fused), "the engine fused its layers otherwise"
    plain = [f.plain for f in fused]
    pool = engine.kv_pool
    reqs = []
    for uid, prompt in enumerate([[5, 6, 7], [100, 200, 300, 400, 500], list(range(20, 60))]):
        req = Req(uid, prompt, SamplingParams(temperature=0), len(prompt) + 1)
        req.pages = pool.allocator.allocate(pool.pages_for(req.max_total_len))
        reqs.append(req)
    lm_inputs: list[torch.Tensor] = []
    lm_head = engine.model.lm_head
    original_head = lm_head.forward

    def head(hidden: torch.Tensor) -> torch.Tensor:
        """The LM head in the torch reference's matmul, alike on both sides: the check is about the
        decoder layers, and in Triton's CPU interpreter a GEMV over the vocabulary is the slowest launch."""
        lm_inputs.append(hidden)
        kernels = kernels_for(hidden)
        install_kernels(hidden.device.type, None)
        try:
            return original_head(hidden)
        finally:
            install_kernels(hidden.device.type, kernels)

    def run(batch, forwards, mistaken: str | None = None) -> torch.Tensor:
        for layer, forward in zip(layers, forwards):
            layer.forward = forward
        if mistaken == "position + 1":
            batch = dataclasses.replace(batch, positions=batch.positions + 1)
        engine.attn_backend.prepare(batch)
        original_norm = cuda_plugin.normed_linear
        lm_head.forward = head
        if mistaken == "residual dropped":
            cuda_plugin.normed_linear = lambda norm, linear, x, residual: original_norm(norm, linear, x, None)
        try:
            with torch.inference_mode(), forward_context(batch, engine.attn_backend):
                return engine.model.forward(batch).double()
        finally:
            lm_head.forward, cuda_plugin.normed_linear = original_head, original_norm

    try:
        run(make_prefill_batch(reqs, [len(r.input_ids) for r in reqs], pool, engine.device), plain)
        for req in reqs:
            req.cached_len = len(req.input_ids)
            req.output_ids.append(9)
        decode = make_decode_batch(reqs, pool, engine.device)
        expected = run(decode, plain)
        got = {mistake: run(decode, fused, mistake) for mistake in mistakes}
    finally:
        for layer, forward in zip(layers, installed):
            if forward is None:
                del layer.forward  # the class's forward again
            else:
                layer.forward = forward
    weight = lm_head.local_weight().double()
    terms = (lm_inputs[1].double().abs() @ weight.abs().t()).max().item()  # sum |h_i w_i| of the largest logit
    config = engine.model_config
    longest = max(config.hidden_size, config.intermediate_size, config.num_heads * config.head_dim)
    bound = 2 * (len(layers) + 1) * gamma(longest, torch.float32) * terms
    return {mistake: (logits - expected).abs().max().item() / bound for mistake, logits in got.items()}
