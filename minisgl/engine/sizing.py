"""How much of this rank's device the engine may take (chapter 11): the KV cache's pages, from
`--num-pages`, `--kv-memory-gb` or the memory free on the device. The engine then takes the minimum
over the ranks, so that every rank admits the same requests.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from minisgl.config import EngineConfig
from minisgl.kvcache import KVCachePool

_CPU_KV_BUDGET_CAP = 1 << 30  # 1 GiB per rank is ~20k SmolLM2 tokens in fp32: plenty on a laptop


def kv_pages(config: EngineConfig, device: torch.device, num_layers: int, kv_heads: int, head_dim: int,
             dtype: torch.dtype) -> int:
    """KV pages this rank can afford, for `num_layers` layers of `kv_heads` heads of `head_dim` in `dtype`."""
    if config.num_pages is not None:
        return config.num_pages
    page_bytes = config.page_size * KVCachePool.bytes_per_token(num_layers, kv_heads, head_dim, dtype)
    budget = config.kv_memory_gb * (1 << 30) if config.kv_memory_gb else default_kv_budget(config, device)
    return int(budget // page_bytes)


def default_kv_budget(config: EngineConfig, device: torch.device) -> float:
    """Bytes for the KV cache when no size was given: 85 % of what is free on a GPU, shared by the
    ranks on it; on a CPU 20 % of the host's available memory per rank, at most 1 GiB."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        # local ranks r, r + count, ... share GPU r: the busiest GPU hosts ceil(ranks / count)
        ranks_here = -(-config.local_world_size // max(1, torch.cuda.device_count()))
        return 0.85 * free / ranks_here
    return min(0.2 * available_host_memory() / config.local_world_size, _CPU_KV_BUDGET_CAP)


def available_host_memory(meminfo: Path = Path("/proc/meminfo")) -> int:
    """Bytes this machine can hand out now: Linux's MemAvailable, which counts the page cache and the
    other memory the kernel can reclaim. Free pages alone (the fallback where there is no MemAvailable)
    can be a small part of it: after a few GB of files were read, 16 of 24 GB sat in the page cache
    and a KV pool sized from free pages could no longer hold one 8,192-token request."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024  # the file counts kB
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
