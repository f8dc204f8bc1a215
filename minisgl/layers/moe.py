"""The mixture-of-experts MLP of Qwen3-MoE, split across ranks one of two ways (chapter 14).

A router (one small replicated linear) scores every token against every expert; each token goes to
its top-k experts, and its output is their SwiGLU MLPs' outputs weighted by the router's softmax
probabilities (renormalised over the k when the model says `norm_topk_prob`).

- `parallel="tp"`: every rank holds every expert, each expert's intermediate dim split like the
  dense MLP's (gate/up by rows, down by columns); each rank computes partial outputs for all the
  tokens, and one all-reduce sums them. Same bytes as a dense MLP.
- `parallel="ep"`: every rank holds num_experts / tp whole experts. Each rank takes its 1/tp share
  of the tokens, sends every (token, expert) pair to the expert's rank (all-to-all), the experts
  run on what arrived, the outputs go back (all-to-all), and an all-gather gives every rank every
  token again for the next layer's tensor-parallel attention.

The experts' math is the kernel table's `expert_outputs` (kernels.py): a readable torch loop over
the experts that got tokens, which the CUDA plug-in replaces by one fused Triton grouped GEMM
(minisgl/kernel/triton/fused_moe.py).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from minisgl.distributed import all_gather, all_reduce, all_to_all_counts, all_to_all_rows, get_tp_info

from .base import BaseOP
from .kernels import kernels_for
from .linear import ReplicatedLinear, divide
from .moe_dispatch import dispatch_plan


class ExpertWeights(BaseOP):
    """This rank's experts, stacked: gate_up_proj [local_experts, 2 * local_inter, hidden] (each
    expert's [gate shard; up shard]) and down_proj [local_experts, hidden, local_inter]."""

    def __init__(self, num_local_experts: int, hidden_size: int, local_intermediate: int) -> None:
        self.gate_up_proj = torch.empty(num_local_experts, 2 * local_intermediate, hidden_size)
        self.down_proj = torch.empty(num_local_experts, hidden_size, local_intermediate)


class SparseMoeBlock(BaseOP):
    """router (`gate`) -> top-k experts -> weighted sum, split across ranks by `parallel`."""

    def __init__(
        self, hidden_size: int, num_experts: int, top_k: int, intermediate_size: int, norm_topk_prob: bool,
        parallel: str,
    ) -> None:
        tp = get_tp_info()
        self.num_experts, self.top_k, self.norm_topk_prob, self.parallel = num_experts, top_k, norm_topk_prob, parallel
        if parallel == "ep":
            self.num_local_experts = divide(num_experts, tp.size, "num_experts")
            local_intermediate = intermediate_size
        else:
            self.num_local_experts = num_experts
            local_intermediate = divide(intermediate_size, tp.size, "moe_intermediate_size")
        self.gate = ReplicatedLinear(hidden_size, num_experts)
        self.experts = ExpertWeights(self.num_local_experts, hidden_size, local_intermediate)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [tokens, hidden], the same on every rank -> [tokens, hidden], the same on every rank."""
        if self.parallel == "ep" and get_tp_info().size > 1:
            return self._forward_expert_parallel(x)
        topk_weights, topk_ids = self.route(x)  # [tokens, k] each
        pair_outputs = self.expert_outputs(x, topk_ids)
        return all_reduce(weighted_sum(pair_outputs, topk_weights))  # the partial sums of the intermediate shards

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x [tokens, hidden] -> (weights [tokens, k] in x's dtype, expert ids [tokens, k]); the softmax
        is taken in fp32, as the reference model does."""
        probs = torch.softmax(self.gate.forward(x).float(), dim=-1)  # [tokens, num_experts]
        weights, ids = torch.topk(probs, self.top_k, dim=-1)
        if self.norm_topk_prob:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return weights.to(x.dtype), ids

    def expert_outputs(self, x: torch.Tensor, topk_ids: torch.Tensor) -> torch.Tensor:
        """x [tokens, hidden], topk_ids [tokens, k] (local expert ids) -> [tokens * k, hidden], each
        (token, slot) pair's unweighted expert output (`TorchKernels.expert_outputs`)."""
        return kernels_for(x).expert_outputs(x, topk_ids, self.experts.gate_up_proj, self.experts.down_proj)

    def _forward_expert_parallel(self, x: torch.Tensor) -> torch.Tensor:
        tp, tokens = get_tp_info(), x.shape[0]
        per_rank = -(-tokens // tp.size)  # this rank routes tokens [rank * per_rank, (rank + 1) * per_rank)
        mine = x[tp.rank * per_rank : (tp.rank + 1) * per_rank]  # [t, hidden], t <= per_rank (maybe 0)
        topk_weights, topk_ids = self.route(mine)
        # experts sit in contiguous blocks: rank r holds experts [r * local, (r + 1) * local)
        expert_rank = torch.arange(self.num_experts, device=x.device) // self.num_local_experts
        plan = dispatch_plan(topk_ids, expert_rank, tp.size)
        # pairs per expert, laid out by destination rank; what comes back: pairs per (source rank, local expert)
        recv_counts = all_to_all_counts(torch.bincount(topk_ids.reshape(-1), minlength=self.num_experts))
        send_split, recv_split = plan.rank_counts.tolist(), recv_counts.view(tp.size, -1).sum(dim=1).tolist()
        received = all_to_all_rows(mine[plan.send_order // self.top_k], send_split, recv_split)  # [pairs in, hidden]
        # the rows arrive by source rank, then by expert: each block of counts names their local expert
        local_ids = torch.arange(self.num_local_experts, device=x.device).repeat(tp.size)
        local_ids = torch.repeat_interleave(local_ids, recv_counts)  # [pairs in]
        outputs = self.expert_outputs(received, local_ids[:, None])
        returned = all_to_all_rows(outputs, recv_split, send_split)  # [pairs out, hidden], in send order
        combined = weighted_sum(returned[plan.inverse], topk_weights)  # [t, hidden]
        padded = F.pad(combined, (0, 0, 0, per_rank - combined.shape[0]))  # all-gather takes equal blocks
        return all_gather(padded)[:tokens]


def weighted_sum(pair_outputs: torch.Tensor, topk_weights: torch.Tensor) -> torch.Tensor:
    """pair_outputs [tokens * k, hidden] (pair = token * k + slot), topk_weights [tokens, k] -> [tokens, hidden]."""
    tokens, k = topk_weights.shape
    return (pair_outputs.view(tokens, k, pair_outputs.shape[-1]) * topk_weights.unsqueeze(-1)).sum(dim=1)
