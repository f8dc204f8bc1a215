"""Chapter 14 on GPUs: the fused Triton MoE kernels equal the torch loop within the rounding bound
derived element by element from the exact result (`expert_mlp_bound`), in fp32 and bf16 at
Qwen3-30B-A3B's expert shapes, and the same bound rejects the kernel's answer to the wrong question
(zeros, 1.5x, wrong expert, gate and up swapped, the wrong tokens' rows); on two GPUs the
experts split by intermediate dim ("tp") or placed whole on ranks ("ep") give the same greedy
tokens as one GPU, with the all-to-all counted. (The tiny MoE models' logits against transformers,
through CUDA graphs, are in test_engine.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from minisgl.layers.moe import expert_outputs_torch
from minisgl.testing.shapes import SHAPES, make_shape_dir
from minisgl.testing.tolerance import assert_within, expert_mlp_bound, expert_mlp_wrong_answers

from two_gpus import dummy_tokens, needs_two_gpus

SHAPE = SHAPES["qwen3-30b-a3b"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("tokens", [1, 7, 300])  # 300 tokens x 8 = 2400 pairs: the 64-row blocks
def test_fused_moe_matches_the_torch_loop(tokens: int, dtype: torch.dtype) -> None:
    # imported here: collecting this file on a CPU must not load the kernels before
    # tests/test_triton_interpret.py switches Triton's interpreter on
    from minisgl.kernel.triton.fused_moe import fused_expert_outputs

    generator = torch.Generator(device="cuda").manual_seed(tokens)
    experts, top_k, hidden = SHAPE["num_experts"], SHAPE["num_experts_per_tok"], SHAPE["hidden_size"]
    inter = SHAPE["moe_intermediate_size"] // 2  # one rank's shard at tp 2
    x = torch.randn(tokens, hidden, generator=generator, device="cuda").to(dtype)
    topk_ids = torch.rand(tokens, experts, generator=generator, device="cuda").topk(top_k, dim=-1).indices
    gate_up = (0.02 * torch.randn(experts, 2 * inter, hidden, generator=generator, device="cuda")).to(dtype)
    down = (0.02 * torch.randn(experts, hidden, inter, generator=generator, device="cuda")).to(dtype)
    fused = fused_expert_outputs(x, topk_ids, gate_up, down)
    reference = expert_outputs_torch(x, topk_ids, gate_up, down)
    bound = expert_mlp_bound(x, topk_ids, gate_up, down)
    print(f"fused moe {tokens} tokens {dtype}: max |fused - torch| {(fused - reference).abs().max().item():.2e}, "
          f"bound {bound.min().item():.2e} to {bound.max().item():.2e}, max |output| {reference.abs().max().item():.2e}")
    assert_within(fused, reference, bound, "fused MoE")
    for name, wrong in expert_mlp_wrong_answers(x, topk_ids, gate_up, down, fused_expert_outputs).items():
        with pytest.raises(AssertionError):
            assert_within(wrong, reference, bound, name)


@pytest.mark.timeout(600)
def test_tp_and_ep_splits_on_two_gpus_answer_like_one(tmp_path: Path) -> None:
    needs_two_gpus()
    model_dir = make_shape_dir("qwen3-30b-a3b", tmp_path / "qwen3-30b-a3b", num_layers=4)  # fp32: 2.4 GB per layer
    reference = dummy_tokens(model_dir)
    assert dummy_tokens(model_dir, tp_size=2, moe_parallel="tp") == reference
    stats = tmp_path / "stats"
    assert dummy_tokens(model_dir, tp_size=2, moe_parallel="ep", comm_stats_dir=str(stats)) == reference
    report = json.loads((stats / "comm-tp0.json").read_text())
    assert report["dist_backend"] == "nccl"  # auto: PyNCCL has no all-to-all
    kinds = {c["kind"] for c in report["phases"]["decode"]["collectives"]}
    assert kinds == {"all_reduce", "all_gather", "all_to_all"}
