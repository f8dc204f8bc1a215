"""What the GPU tests of several ranks share (chapters 12 and 14): a skip without two GPUs, and the
greedy tokens of a dummy-weight engine on fixed prompts (fp32: the same model at every tp size)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from minisgl import LLM, SamplingParams

GREEDY = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)
PROMPTS = [[5, 17, 99, 3], list(range(40, 71)), [7, 8, 9, 10, 11, 12]]


def needs_two_gpus() -> None:
    if torch.cuda.device_count() < 2:
        pytest.skip(f"needs 2 GPUs (one per rank or replica); this machine has {torch.cuda.device_count()}")


def dummy_tokens(model_dir: Path, **kwargs) -> list[list[int]]:
    with LLM(model_dir, device="cuda", dtype="float32", load_format="dummy", kv_memory_gb=1.0, progress=False,
             **kwargs) as llm:
        return [out.token_ids for out in llm.generate(PROMPTS, GREEDY)]
