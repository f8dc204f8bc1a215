"""GPU tests: every test here is marked `gpu` and skips, with its reason, where torch sees no CUDA
device (CPU-only CI). Run them on a GPU machine with `pytest tests/gpu -m gpu`."""

from __future__ import annotations

import pytest
import torch

NO_GPU_REASON = "needs an NVIDIA GPU: torch sees no CUDA device (CPU-only machine)"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/gpu/" not in str(item.path).replace("\\", "/"):
            continue
        item.add_marker(pytest.mark.gpu)
        if not torch.cuda.is_available():
            item.add_marker(pytest.mark.skip(reason=NO_GPU_REASON))
