"""Stacking a mixture-of-experts checkpoint's per-expert tensors into this rank's [local experts, ...]
weights, one checkpoint tensor at a time (chapter 14; the streaming loader is chapter 04's).

A Qwen3-MoE checkpoint stores `model.layers.L.mlp.experts.E.{gate,up,down}_proj.weight` for every
expert E. The engine holds `model.layers.L.mlp.experts.gate_up_proj` [local experts, 2 * inter, hidden]
and `...experts.down_proj` [local experts, hidden, inter]: each is allocated once, when its first
expert tensor arrives, filled expert by expert, and handed on when the last one is in.
- moe_parallel "tp": every expert is local, sharded like the dense MLP (gate/up rows, down columns);
- moe_parallel "ep": rank r keeps whole experts [r * local, (r + 1) * local) and skips the others.
"""

from __future__ import annotations

import re

import torch

from .config import ModelConfig, ModelError

EXPERT_TENSOR = re.compile(r"^(?P<prefix>.+\.experts)\.(?P<expert>\d+)\.(?P<proj>gate_proj|up_proj|down_proj)\.weight$")


class ExpertStacker:
    """Collects one rank's expert tensors into stacked buffers; `add` returns each finished one."""

    def __init__(self, config: ModelConfig, rank: int, tp_size: int, dtype: torch.dtype | None) -> None:
        self.config, self.rank, self.tp_size, self.dtype = config, rank, tp_size, dtype
        ep = config.moe_parallel == "ep"
        self.num_local = config.num_experts // tp_size if ep else config.num_experts
        self.first_expert = rank * self.num_local if ep else 0
        self.local_inter = config.moe_intermediate_size if ep else config.moe_intermediate_size // tp_size
        self._buffers: dict[str, torch.Tensor] = {}
        self._missing: dict[str, int] = {}  # engine name -> expert tensors still to come

    @staticmethod
    def owns(name: str) -> bool:
        """Whether checkpoint tensor `name` is one expert's projection."""
        return EXPERT_TENSOR.match(name) is not None

    def add(self, name: str, full: torch.Tensor) -> tuple[str, torch.Tensor] | None:
        """Put this rank's part of expert tensor `name` into its stacked buffer; (engine name, stacked
        tensor) once the buffer is complete, else None (also for another rank's expert)."""
        from .weight import shard_tensor

        match = EXPERT_TENSOR.match(name)
        assert match is not None, name
        local = int(match["expert"]) - self.first_expert
        if not 0 <= local < self.num_local:
            return None  # expert parallelism: another rank holds this expert
        proj = match["proj"]
        part = full if self.config.moe_parallel == "ep" else shard_tensor(name, full, self.rank, self.tp_size, self.config)
        stacked_name = f"{match['prefix']}.{'down_proj' if proj == 'down_proj' else 'gate_up_proj'}"
        buffer = self._buffer(stacked_name, part)
        if proj == "down_proj":
            buffer[local] = part  # [hidden, local_inter]
        else:  # gate rows first, then up rows, as the dense MLP's gate_up_proj
            start = 0 if proj == "gate_proj" else self.local_inter
            buffer[local, start : start + self.local_inter] = part
        self._missing[stacked_name] -= 1
        if self._missing[stacked_name] > 0:
            return None
        del self._missing[stacked_name]
        return stacked_name, self._buffers.pop(stacked_name)

    def _buffer(self, stacked_name: str, part: torch.Tensor) -> torch.Tensor:
        if stacked_name not in self._buffers:
            hidden = self.config.hidden_size
            is_down = stacked_name.endswith("down_proj")
            shape = (self.num_local, hidden, self.local_inter) if is_down else (self.num_local, 2 * self.local_inter, hidden)
            self._buffers[stacked_name] = torch.empty(shape, dtype=self.dtype or part.dtype, device=part.device)
            self._missing[stacked_name] = self.num_local * (1 if is_down else 2)
        return self._buffers[stacked_name]

    def check_complete(self) -> None:
        if self._missing:
            raise ModelError(f"checkpoint is missing experts of {sorted(self._missing)[:3]}")
