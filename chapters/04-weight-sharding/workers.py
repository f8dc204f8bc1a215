"""Code that runs in a fresh process for chapter 04: load a checkpoint one of two ways and record
this process's private memory while it happens (spawned, so every measurement starts clean)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import torch

from minisgl.models.config import ModelConfig
from minisgl.models.checkpoint import iter_checkpoint
from minisgl.models.weight import load_weights, shard_tensor


def resident_bytes() -> tuple[int, int]:
    """(RssAnon, RssFile): memory this process owns, and file pages it maps (page cache).

    safetensors maps the checkpoint file, so reading a tensor touches file pages, which the
    kernel can drop at any time; what a loader really costs is the private (anonymous) part.
    """
    values = {}
    with open("/proc/self/status") as status:
        for line in status:
            key, _, rest = line.partition(":")
            if key in ("RssAnon", "RssFile"):
                values[key] = int(rest.split()[0]) * 1024
    if len(values) != 2:
        raise RuntimeError("no RssAnon/RssFile in /proc/self/status: this measurement needs Linux")
    return values["RssAnon"], values["RssFile"]


def measure_load(
    rank: int, world_size: int, model_dir: Path, strategy: str, tp_size: int, dtype: torch.dtype
) -> tuple[list[tuple[float, int, int]], int]:
    """Samples (seconds, private bytes, file bytes), both above the start, every 2 ms while rank 0
    of `tp_size` loads `model_dir` into `dtype`; and the bytes of the shards it kept, as the engine
    keeps them.

    strategy "read-only": iterate over the checkpoint and keep nothing (what reading alone costs).
    strategy "whole-then-shard": convert every tensor to `dtype` first, then cut this rank's shards.
    strategy "streaming": minisgl's load_weights: one tensor at a time, shard, convert, merge.
    """
    config = ModelConfig.from_dir(model_dir)
    samples: list[tuple[float, int, int]] = []
    done = threading.Event()
    start, (anon0, file0) = time.perf_counter(), resident_bytes()

    def sample() -> None:
        while not done.is_set():
            anon, file = resident_bytes()
            samples.append((time.perf_counter() - start, anon - anon0, file - file0))
            time.sleep(0.002)

    sampler = threading.Thread(target=sample)
    sampler.start()
    if strategy == "read-only":
        kept = {}
        for _name, _tensor in iter_checkpoint(model_dir):
            pass
    elif strategy == "whole-then-shard":
        everything = {name: tensor.to(dtype) for name, tensor in iter_checkpoint(model_dir)}
        kept = {name: shard_tensor(name, t, 0, tp_size, config) for name, t in everything.items()}
        del everything
    elif strategy == "streaming":
        kept = dict(load_weights(iter_checkpoint(model_dir), config, 0, tp_size, dtype, torch.device("cpu")))
    else:
        raise ValueError(f"unknown strategy {strategy!r}; use read-only, whole-then-shard or streaming")
    time.sleep(0.05)  # one more sample after the last free
    done.set()
    sampler.join()
    return samples, sum(t.numel() * t.element_size() for t in kept.values())
