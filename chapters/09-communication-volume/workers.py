"""Code that runs inside each rank for chapter 09: time gloo all-reduces of growing size, and
count the bytes a real forward pass hands to the communication seam."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from minisgl import SamplingParams
from minisgl.message import GenerateRequest
from minisgl.scheduler import LocalIO, Scheduler

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from course import CollectiveRecorder, engine_on_this_rank  # noqa: E402


def time_all_reduce(rank: int, world_size: int, sizes: list[int], repeats: int) -> dict[int, float]:
    """Median seconds of one fp32 all-reduce of each size in bytes (after one warm-up call)."""
    medians = {}
    for nbytes in sizes:
        x = torch.ones(nbytes // 4)
        dist.all_reduce(x)  # warm-up: first use of a size sets up buffers
        times = []
        for _ in range(repeats):
            dist.barrier()  # start together, so we time the collective, not a late peer
            start = time.perf_counter()
            dist.all_reduce(x)
            times.append(time.perf_counter() - start)
        medians[nbytes] = sorted(times)[len(times) // 2]
    return medians


def bytes_of_one_forward(rank: int, world_size: int, model_dir: Path, init_addr: str, prompt: list[int]) -> dict:
    """Run one prefill of `prompt` and add up the bytes each kind of collective was handed."""
    engine = engine_on_this_rank(rank, world_size, model_dir, init_addr)
    recorder = CollectiveRecorder.install()
    io = LocalIO()
    io.inbox.append(GenerateRequest(0, prompt, SamplingParams(temperature=0, max_tokens=1)))
    Scheduler(engine.config, engine, io).step()
    engine.shutdown()
    totals = {"all_reduce": 0, "all_gather": 0, "calls": len(recorder.calls)}
    for call in recorder.calls:
        totals[call.op] += call.nbytes
    return totals
