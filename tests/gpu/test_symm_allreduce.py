"""The symmetric-memory all-reduce (chapter 13) on two GPUs: it must give NCCL's sums exactly
(small messages through the one-shot kernel, the rest through PyNCCL below it), survive many calls
in a row on one buffer, replay inside a CUDA graph, and leave an fp32 engine's greedy tokens equal
to PyNCCL's. Every check fails with a message that says which path and size went wrong."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from minisgl import LLM, SamplingParams
from minisgl.testing.multiprocess import run_ranks
from minisgl.testing.shapes import make_shape_dir

CASES = [  # (dtype, numel): what the seam sees in a decode step, and what must fall back
    (torch.bfloat16, 4096), (torch.bfloat16, 8 * 4096), (torch.float32, 4096 + 4), (torch.bfloat16, 2),
    (torch.bfloat16, 128 * 4096), (torch.bfloat16, 256 * 4096),  # 1 MiB (one-shot), 2 MiB (PyNCCL)
    (torch.float16, 4096), (torch.bfloat16, 7),  # not a kernel dtype; 14 bytes: not 4-byte aligned
]


def _needs_two_gpus() -> None:
    if torch.cuda.device_count() < 2:
        pytest.skip(f"needs 2 GPUs (one per rank); this machine has {torch.cuda.device_count()}")


def _symm_worker(rank: int, world_size: int) -> dict:
    from minisgl.distributed import DistributedCommunicator, all_reduce, enable_pynccl
    from minisgl.distributed.symm_mem import SymmMemDistributedImpl, enable_symm_mem, keep_multicast_off

    keep_multicast_off()
    device = torch.device("cuda", rank)
    torch.cuda.set_device(device)
    enable_pynccl(dist.group.WORLD, device)
    nccl = DistributedCommunicator.plugins[-1]
    enable_symm_mem(dist.group.WORLD, device)
    symm = DistributedCommunicator.plugins[-1]
    assert isinstance(symm, SymmMemDistributedImpl), "the symmetric-memory plugin is not on top"
    failures, paths = [], []

    def values(dtype: torch.dtype, n: int, r: int, shift: int = 0) -> torch.Tensor:
        return ((torch.arange(n, device=device) + shift) % 61 + 3 * r).to(dtype)  # small integers: exact sums

    for dtype, n in CASES:
        x = values(dtype, n, rank)
        expected = sum(values(dtype, n, r) for r in range(world_size))
        paths.append("symm" if symm.fits(x) else "fallback")
        by_nccl = nccl.all_reduce(x.clone())
        by_seam = all_reduce(x.clone())
        torch.cuda.synchronize()
        if not torch.equal(by_nccl, expected):
            failures.append(f"PyNCCL {dtype} x {n}: wrong sum")
        if not torch.equal(by_seam, expected):
            failures.append(f"{paths[-1]} {dtype} x {n}: differs from the exact sum "
                            f"(max error {(by_seam.float() - expected.float()).abs().max().item()})")

    for i in range(200):  # one buffer, back to back, sizes changing: no rank may overwrite it early
        n = 4096 * (1 + i % 5)
        got = all_reduce(values(torch.bfloat16, n, rank, shift=i))
        if i % 50 == 49:
            torch.cuda.synchronize()
        if not torch.equal(got, sum(values(torch.bfloat16, n, r, shift=i) for r in range(world_size))):
            failures.append(f"call {i} of 200 back to back ({n} elements): wrong sum")
            break

    static = torch.zeros(4096, dtype=torch.bfloat16, device=device)
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up outside the capture, as CudaGraphRunner does
        all_reduce(static * 2)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    with torch.cuda.graph(graph):
        out = all_reduce(static * 2)
    for step in range(3):
        static.copy_(values(torch.bfloat16, 4096, rank, shift=step))
        graph.replay()
        torch.cuda.synchronize()
        expected = 2 * sum(values(torch.bfloat16, 4096, r, shift=step) for r in range(world_size))
        if not torch.equal(out, expected):
            failures.append(f"graph replay {step}: wrong sum")
    del graph
    return {"failures": failures, "paths": paths}


@pytest.mark.timeout(300)
def test_symm_mem_all_reduce_equals_nccl_and_replays_in_a_graph() -> None:
    _needs_two_gpus()
    results = run_ranks(_symm_worker, 2, timeout_s=240)
    for rank, result in enumerate(results):
        assert not result["failures"], f"rank {rank}: {result['failures']}"
    assert results[0]["paths"] == ["symm"] * 5 + ["fallback"] * 3, results[0]["paths"]
    assert os.environ.get("NCCL_NVLS_ENABLE", "0") == "0"  # this process never turned multicast on


GREEDY = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)
PROMPTS = [[5, 17, 99, 3], list(range(40, 71)), [7, 8, 9, 10, 11, 12]]


@pytest.mark.timeout(600)
def test_an_fp32_engine_gives_pyncll_tokens_with_the_symm_all_reduce_in_cuda_graphs(tmp_path: Path) -> None:
    """fp32 at tp 2: a two-operand sum rounds the same in either kernel, so the tokens are equal;
    decode runs in CUDA graphs (the default), so the one-shot kernel is replayed there."""
    _needs_two_gpus()
    model_dir = make_shape_dir("llama-125m", tmp_path / "llama-125m")

    def tokens(backend: str) -> list[list[int]]:
        with LLM(model_dir, tp_size=2, device="cuda", dtype="float32", load_format="dummy", kv_memory_gb=1.0,
                 dist_backend=backend, progress=False) as llm:
            return [out.token_ids for out in llm.generate(PROMPTS, GREEDY)]

    assert tokens("symm") == tokens("pynccl")
