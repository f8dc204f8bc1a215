"""The one seam between the layers and the hardware: every computation a layer makes that is not a
collective goes through a table of kernels, picked by the device of its input (chapters 07 and 10).

`TorchKernels` is that table in plain torch: the reference every faster kernel is tested against,
and what every device runs until a speed plug-in installs its own table, after the model is built
(`install_kernels`): minisgl/cpu/ on a CPU, minisgl/kernel/ on CUDA. A plug-in's table computes the
same math and may hold weights of its own making (quantized codes, a prepacked layout) that its
`linear` knows how to multiply. So a layer's forward is one line with no branch on device, dtype,
weight format or kernel: `kernels_for(x).linear(x, self.weight, self.bias)`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


class TorchKernels:
    """The kernels a layer calls, in plain torch. Plug-ins subclass it and override what they speed up."""

    def linear(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        """x [tokens, in] @ weight.T [in, out] + bias -> [tokens, out]."""
        return F.linear(x, weight, bias)

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float,
                 residual: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(RMSNorm(x + residual) * weight, x + residual) over the last dim; without a residual, of x."""
        summed = x if residual is None else x + residual
        # Normalize in fp32, round to the model dtype, then scale: the rounding order of Hugging
        # Face's Llama. In bf16 a fused norm-and-scale rounds once less, which is enough to flip a
        # close greedy choice (SmolLM2 then stops answering "Paris"). In fp32 the casts are no-ops.
        normed = F.rms_norm(summed.float(), weight.shape, None, eps).to(x.dtype)
        return weight * normed, summed

    def silu_and_mul(self, gate_up: torch.Tensor) -> torch.Tensor:
        """[tokens, 2 * inter] -> [tokens, inter]: silu(gate) * up, the SwiGLU activation."""
        gate, up = gate_up.chunk(2, dim=-1)
        return F.silu(gate) * up

    def rope(self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor,
             cos_sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """q [tokens, q_heads, d], k [tokens, kv_heads, d] rotated by position (rotate-half layout);
        cos_sin [max_position, d] = [cos | sin] of every position's angles."""
        cos, sin = cos_sin[positions].unsqueeze(1).chunk(2, dim=-1)  # [tokens, 1, d / 2] each
        return rotate_half(q, cos, sin), rotate_half(k, cos, sin)

    def embedding(self, ids: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
        """ids [tokens] -> their rows of table [rows, hidden]."""
        return F.embedding(ids, table)

    def expert_outputs(self, x: torch.Tensor, topk_ids: torch.Tensor, gate_up: torch.Tensor,
                       down: torch.Tensor) -> torch.Tensor:
        """x [tokens, hidden], topk_ids [tokens, k] (local expert ids), gate_up [experts, 2 * inter, hidden],
        down [experts, hidden, inter] -> [tokens * k, hidden]: row token * k + slot is the (unweighted)
        output of expert topk_ids[token, slot] on x[token]. A loop over the experts that got tokens:
        sort the pairs by expert, then one SwiGLU MLP per expert (chapter 14)."""
        k = topk_ids.shape[1]
        experts = topk_ids.reshape(-1)  # [pairs]
        by_expert = torch.sort(experts, stable=True).indices  # pairs grouped by expert
        counts = torch.bincount(experts, minlength=gate_up.shape[0]).tolist()
        out = x.new_empty(experts.numel(), x.shape[1])
        for expert, pairs in enumerate(by_expert.split(counts)):
            if pairs.numel() == 0:
                continue
            rows = x[pairs // k]  # [pairs of this expert, hidden]
            out[pairs] = F.linear(self.silu_and_mul(F.linear(rows, gate_up[expert])), down[expert])
        return out


def rotate_half(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate each (x[i], x[i + d/2]) pair by its angle: x * cos + rotate_half(x) * sin."""
    first, second = x.chunk(2, dim=-1)
    return torch.cat([first * cos - second * sin, second * cos + first * sin], dim=-1)


_REFERENCE = TorchKernels()
_installed: dict[str, TorchKernels] = {}  # device type ("cpu", "cuda") -> the table a plug-in installed


def install_kernels(device_type: str, table: TorchKernels | None) -> None:
    """Make `table` the kernels of every tensor on `device_type` in this process, until another is
    installed (None: the torch reference again). A device plug-in calls it once its engine's model is
    built: every engine installs the table its own settings need."""
    if table is None:
        _installed.pop(device_type, None)
    else:
        _installed[device_type] = table


def kernels_for(x: torch.Tensor) -> TorchKernels:
    """The kernel table for x's device: a plug-in's, else the torch reference."""
    return _installed.get(x.device.type, _REFERENCE)
