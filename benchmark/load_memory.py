"""Peak host memory while one rank streams its weights in (shard first, then merge).

Samples this process's anonymous RSS (RssAnon: heap memory, not the page cache of the memory-mapped
checkpoint file, which the kernel can drop at any time) every millisecond while `Engine` loads the
checkpoint, then prints the RSS before loading, at its peak, and after loading, next to the largest
single tensor: the peak should exceed the final size by about one full tensor plus the merge
buffer, never the checkpoint.

    python benchmark/load_memory.py                    # embedded SmolLM2, tp = 1
    python benchmark/load_memory.py --tp 3 --rank 1    # what rank 1 of 3 holds
"""

from __future__ import annotations

import argparse
import threading
import time

import safetensors
import torch

from minisgl.distributed import set_tp_info
from minisgl.models.config import ModelConfig
from minisgl.models.default_model import ensure_default_model
from minisgl.models.registry import create_model
from minisgl.models.checkpoint import checkpoint_files, iter_checkpoint
from minisgl.models.weight import load_weights

MIB = 1 << 20


def anonymous_rss() -> int:
    """Bytes of this process's anonymous resident memory (Linux /proc)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no RssAnon in /proc/self/status (Linux only)")


def largest_tensor_bytes(model_dir) -> int:
    largest = 0
    for path in checkpoint_files(model_dir):
        with safetensors.safe_open(str(path), framework="pt") as f:
            for name in f.keys():
                numel = 1
                for dim in f.get_slice(name).get_shape():
                    numel *= dim
                largest = max(largest, numel * 4)  # fp32 checkpoint
    return largest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None)
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--rank", type=int, default=0)
    args = parser.parse_args()
    model_dir = args.model or ensure_default_model()
    config = ModelConfig.from_dir(model_dir)
    set_tp_info(args.rank, args.tp)
    with torch.device("meta"):
        model = create_model(config)
    before = anonymous_rss()
    peak = before
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, anonymous_rss())
            time.sleep(0.001)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    loaded = load_weights(iter_checkpoint(model_dir), config, args.rank, args.tp, torch.float32, torch.device("cpu"))
    for name, tensor in loaded:
        model.set_weight(name, tensor)
    done.set()
    sampler.join()
    after = anonymous_rss()
    checkpoint = sum(p.stat().st_size for p in checkpoint_files(model_dir))
    largest = largest_tensor_bytes(model_dir)
    print(f"checkpoint on disk      {checkpoint / MIB:8.1f} MiB")
    print(f"largest single tensor   {largest / MIB:8.1f} MiB")
    print(f"RSS before loading      {before / MIB:8.1f} MiB")
    print(f"RSS after loading       {after / MIB:8.1f} MiB  (+{(after - before) / MIB:.1f}: this rank's shard)")
    print(f"RSS peak while loading  {peak / MIB:8.1f} MiB  (+{(peak - after) / MIB:.1f} over the final size)")


if __name__ == "__main__":
    main()
