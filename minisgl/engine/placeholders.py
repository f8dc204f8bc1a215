"""Placeholder token ids of the overlap schedule (chapter 10).

With overlap, the scheduler builds step N+1 before step N's tokens reach the host: a request's
input id is then the placeholder -(row + 1), "the token of batch row `row` of step N". Step N left
its greedy tokens in a device buffer (`future_tokens`); the device swaps them in, so the host never
waits. Both steps run on one CUDA stream, so step N's write comes before step N+1's read.
"""

from __future__ import annotations

import torch


def resolve_placeholders(input_ids: torch.Tensor, future_tokens: torch.Tensor) -> None:
    """In place: input_ids [tokens] with each -(i + 1) replaced by future_tokens[i]."""
    previous = future_tokens[(-input_ids - 1).clamp_(min=0)]  # [tokens]; rows without a placeholder read row 0
    input_ids.copy_(torch.where(input_ids < 0, previous, input_ids))
