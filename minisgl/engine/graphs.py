"""Which decode graphs a rank records (chapter 10): CUDA graphs on a GPU (cuda_graph.py), CPU graphs
where a decode step is all C calls (minisgl/cpu/graphs.py), or none, with the reason logged.
"""

from __future__ import annotations

import logging

import torch

from minisgl import cpu
from minisgl.attention import AttentionBackend
from minisgl.config import EngineConfig
from minisgl.distributed import COMM_COUNTER
from minisgl.layers import BaseOP

from .cuda_graph import CudaGraphRunner

logger = logging.getLogger(__name__)

_MAX_GRAPH_BS = 256


def decode_graphs(
    model: BaseOP, attn_backend: AttentionBackend, config: EngineConfig, device: torch.device, dist_backend: str,
    future_tokens: torch.Tensor,
) -> tuple[CudaGraphRunner | None, cpu.CpuGraphRunner | None]:
    """(CUDA graph runner, CPU graph runner) of this rank; at most one of them is not None."""
    if device.type == "cpu":
        return None, cpu.cpu_graph_runner(model, attn_backend, config)
    max_bs = config.cuda_graph_max_bs
    if max_bs is None:
        max_bs = min(config.max_running_requests, _MAX_GRAPH_BS)
    if max_bs <= 0:
        return None, None
    if (reason := _why_eager(config, attn_backend, dist_backend)) is not None:
        logger.warning(reason)
        return None, None
    with torch.inference_mode():
        return CudaGraphRunner(model, attn_backend, max_bs, device, future_tokens), None


def _why_eager(config: EngineConfig, attn_backend: AttentionBackend, dist_backend: str) -> str | None:
    """Why decode cannot run in CUDA graphs here, or None where it can."""
    if config.pp_info.size > 1:
        return "pipeline stages run decode eagerly (no CUDA graphs)"
    if COMM_COUNTER.counting:
        return "counting collectives (--comm-stats-dir): decode runs eagerly, graph replays run no Python"
    if config.moe_parallel == "ep" and config.tp_info.size > 1:
        return "expert parallelism sizes its all-to-all from each step's routing on the host; running decode eagerly"
    if not attn_backend.supports_cuda_graph:
        return "CUDA graphs need the triton or flashinfer attention backend; running decode eagerly"
    if config.tp_info.size > 1 and dist_backend == "gloo":
        return "gloo collectives cannot be captured in a CUDA graph; running decode eagerly"
    return None
