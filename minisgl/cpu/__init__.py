"""The CPU speed plug-in (chapter 16, "The CPU path"): everything that
makes minisgl fast on a CPU, kept out of the layers and the loader a learner reads.

- `accelerate(model, settings, ...)`: once the model is built and loaded, install the CPU's kernel
  table (table.py: minisgl's C kernels, kernels.py and *.c; fixed row tiles for --deterministic,
  batch_invariant.py) and put each weight in the form its matmul runs fastest in here: GGUF's
  4-/8-bit blocks (quantized.py, gguf.py), oneDNN's prepacked layout (prepacked.py), AMX tiles
  (amx_tiles.py);
- `GGUFCheckpoint`: the loader's source for `--quantization gguf` (gguf.py);
- `cpu_graph_runner`: decode steps recorded and replayed as C calls (graphs.py, capture.py);
- the probe that resolves `dtype="auto"` on a CPU (precision.py).
It imports the layers and the models, which never import it; the engine calls it.
"""

from __future__ import annotations

from pathlib import Path

import torch

from minisgl.layers import BaseOP, install_kernels
from minisgl.models.config import ModelConfig

from .gguf import GGUFCheckpoint, pack_gguf_weights
from .graphs import CpuGraphRunner, cpu_graph_runner
from .kernels import cpu_kernels
from .prepacked import prepack_linear_weights, prepacking_available
from .settings import CpuSettings
from .table import CpuKernelTable


def accelerate(model: BaseOP, settings: CpuSettings, model_dir: Path, config: ModelConfig) -> None:
    """Plug the CPU's kernels and weight forms into `model`, loaded from `model_dir` (whose GGUF
    `--quantization gguf` read) with `settings` resolved. The capstone's TP steps (`settings.tp_ops`)
    multiply plain tensors their own way, so their weights stay as loaded."""
    install_kernels("cpu", CpuKernelTable(cpu_kernels(), settings.deterministic))
    dtype = getattr(torch, settings.dtype)
    if settings.quantization == "gguf":
        pack_gguf_weights(model, model_dir, config, dtype, settings.max_quantized_rows, settings.deterministic)
    if dtype == torch.float32 and not settings.deterministic and settings.tp_ops is None and prepacking_available():
        # oneDNN's layout once, instead of a BLAS repack per call (not under --deterministic: its
        # fixed-tile F.linear calls keep rows from depending on the batch)
        prepack_linear_weights(model, getattr(torch, settings.matmul_dtype))


__all__ = ["CpuGraphRunner", "CpuKernelTable", "CpuSettings", "GGUFCheckpoint", "accelerate", "cpu_graph_runner",
           "cpu_kernels"]
