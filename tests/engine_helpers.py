"""Shared by the engine tests: last-position logits from minisgl and from transformers."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from minisgl.core import Req, SamplingParams
from minisgl.engine.engine import Engine
from minisgl.scheduler import SchedulerConfig
from minisgl.scheduler.batch import make_prefill_batch


def minisgl_last_logits(model_dir: Path, prompts: list[list[int]], dtype: str = "float32") -> torch.Tensor:
    """One prefill batch of all prompts at tp = 1 -> [num_prompts, vocab]."""
    engine = Engine(SchedulerConfig(model_path=model_dir, dtype=dtype, num_pages=4096, progress=False))
    reqs = []
    for uid, prompt in enumerate(prompts):
        req = Req(uid, prompt, SamplingParams(temperature=0), len(prompt))
        req.pages = engine.kv_pool.allocator.allocate(engine.kv_pool.pages_for(len(prompt)))
        reqs.append(req)
    batch = make_prefill_batch(reqs, [len(p) for p in prompts], engine.kv_pool, engine.device)
    return engine.forward_logits(batch)


def transformers_last_logits(model_dir: Path, prompts: list[list[int]], dtype: str = "float32") -> torch.Tensor:
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype)).eval()
    with torch.inference_mode():
        return torch.stack([model(torch.tensor([p])).logits[0, -1] for p in prompts])
