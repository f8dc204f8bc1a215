"""PyNCCL on a GPU: a one-rank communicator checks the ctypes bindings, the unique-id broadcast and
CUDA-graph capture on any single GPU; engine runs at tp = 2 through PyNCCL and torch NCCL need one
GPU per rank and skip otherwise."""

from __future__ import annotations

from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

from minisgl import LLM, SamplingParams
from minisgl.testing.tiny_models import TINY_MODEL_SPECS
from minisgl.utils import free_port


@pytest.fixture
def one_rank_group():
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1,
                            timeout=timedelta(seconds=60))
    yield dist.group.WORLD
    dist.destroy_process_group()


def test_one_rank_communicator_reduces_gathers_and_is_capturable(one_rank_group) -> None:
    from minisgl.distributed.pynccl import PyNCCLCommunicator, find_nccl_library

    comm = PyNCCLCommunicator(one_rank_group, torch.device("cuda:0"))
    print(f"NCCL {comm.nccl.version()} from {find_nccl_library()}")
    try:
        x = torch.randn(1000, device="cuda", dtype=torch.bfloat16)
        expected = x.clone()
        assert torch.equal(comm.all_reduce(x), expected)
        gathered = comm.all_gather(torch.arange(6, device="cuda", dtype=torch.float32).view(3, 2))
        assert gathered.shape == (3, 2) and torch.equal(gathered.flatten(), torch.arange(6.0, device="cuda"))

        static = torch.zeros(4096, device="cuda")
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = comm.all_reduce(static * 2)  # a kernel, then the collective, both captured
        static.copy_(torch.arange(4096.0, device="cuda"))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, 2 * torch.arange(4096.0, device="cuda"))
    finally:
        comm.close()


def _greedy_tp(tp: int, dist_backend: str, model_dir) -> list[list[int]]:
    generator = torch.Generator().manual_seed(1)
    vocab = TINY_MODEL_SPECS["llama"].config.vocab_size
    prompts = [torch.randint(3, vocab, (n,), generator=generator).tolist() for n in (3, 17, 40)]
    with LLM(model_dir, tp_size=tp, device="cuda", dtype="float32", dist_backend=dist_backend, kv_memory_gb=1.0,
             progress=False) as llm:
        greedy = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)
        return [out.token_ids for out in llm.generate(prompts, greedy)]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("dist_backend", ["pynccl", "nccl"])
def test_tp2_with_one_gpu_per_rank_equals_tp1(dist_backend: str, tiny_model_dir) -> None:
    if torch.cuda.device_count() < 2:
        pytest.skip(f"needs 2 GPUs (one per rank) for {dist_backend}; this machine has {torch.cuda.device_count()}")
    model_dir = tiny_model_dir("llama")
    assert _greedy_tp(2, dist_backend, model_dir) == _greedy_tp(1, "gloo", model_dir)
