"""The symmetric-memory all-reduce's guards, on any machine (its sums are checked on two GPUs in
tests/gpu/test_symm_mem.py): multicast stays off, and where it cannot run it says why."""

from __future__ import annotations

import pytest
import torch

from minisgl.distributed.symm_mem import keep_multicast_off, symm_mem_unavailable
from minisgl.distributed import resolve_dist_backend


def test_multicast_is_switched_off_unless_the_user_chose(monkeypatch) -> None:
    monkeypatch.delenv("TORCH_SYMM_MEM_DISABLE_MULTICAST", raising=False)
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "0")
    keep_multicast_off()
    import os

    assert os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1" and os.environ["NCCL_NVLS_ENABLE"] == "0"


def test_it_says_why_it_cannot_run(monkeypatch) -> None:
    assert symm_mem_unavailable(torch.device("cpu")) == "it needs CUDA GPUs"
    monkeypatch.setenv("TORCH_SYMM_MEM_DISABLE_MULTICAST", "0")
    assert "TORCH_SYMM_MEM_DISABLE_MULTICAST must be 1" in symm_mem_unavailable(torch.device("cuda"))


def test_the_symm_backend_needs_a_gpu_per_rank() -> None:
    with pytest.raises(ValueError, match="dist backend 'symm' needs one GPU per rank, got a CPU"):
        resolve_dist_backend("symm", torch.device("cpu"), 2, 2)
