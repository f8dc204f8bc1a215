"""Launch settings are resolved once (`minisgl.config.resolve_config`), before any process starts,
for the CLI and `LLM` alike; the launcher never loads the engine; the batch limits left unset are
sized by the engine from its device and KV pool (`minisgl.engine.sizing`); and
`minisgl.distributed.join` is where a rank's groups are made, and where its control bytes are agreed on."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest
import torch

from minisgl import LLM
from minisgl.config import ArgsError, SchedulerConfig, resolve_config
from minisgl.distributed import DistributedInfo, broadcast_json, get_tp_info, join
from minisgl.server.args import check_args, parse_args
from minisgl.testing.multiprocess import run_ranks


def _one_line(error: BaseException) -> str:
    assert "\n" not in str(error), str(error)
    return str(error)


@pytest.mark.parametrize(("settings", "message"), [
    (dict(dist_backend="nccl"), "dist backend 'nccl' needs one GPU per rank, got a CPU; use --dist-backend gloo"),
    (dict(dist_backend="mpi"), "unknown dist backend 'mpi'"),
    (dict(attention_backend="flashinfer"), "attention backend 'flashinfer' runs on CUDA only"),
    (dict(dtype="float8"), "unknown dtype 'float8'"),
    (dict(quantization="gguf", load_format="dummy"), "--load-format dummy has no GGUF to quantize from"),
    (dict(cache="lru"), "unknown cache 'lru'; use radix or naive"),
    (dict(dp_policy="random"), "unknown DP policy 'random'"),
    (dict(dp_size=0), "--dp-size must be at least 1, got 0"),
    (dict(num_pages=1), "--num-pages must be at least 2"),
], ids=lambda v: v if isinstance(v, str) else "-".join(v))
def test_llm_refuses_a_bad_setting_before_any_spawn(settings: dict, message: str, tiny_model_dir) -> None:
    """`LLM` runs the checks the CLI runs; a bad dist backend used to fail inside a child rank."""
    with pytest.raises(ArgsError) as info:
        LLM(tiny_model_dir("llama"), tp_size=2, **settings)
    assert message in _one_line(info.value)


def test_the_cli_and_llm_share_one_resolver(tiny_model_dir) -> None:
    model_dir = tiny_model_dir("llama")
    cli = check_args(parse_args(["--model", str(model_dir), "--tp-size", "2", "--device", "auto"])).scheduler
    direct = resolve_config(SchedulerConfig(model_path=model_dir, tp_info=DistributedInfo(0, 2), device="auto"))
    assert cli == direct
    # the machine's choices are made here; dtype "auto" is measured where the engine runs, not in the launcher
    expected_device = "cuda" if torch.cuda.is_available() else "cpu"
    assert (direct.device, direct.dtype) == (expected_device, "auto")
    if expected_device == "cpu":
        assert (direct.dist_backend, direct.attention_backend) == ("gloo", "torch")
    assert resolve_config(direct) == direct  # a resolved config resolves to itself


def test_the_launcher_never_loads_the_engine() -> None:
    """Checking the flags and spawning ranks need no engine (nor its precision probe) in the launcher."""
    code = ("import sys, minisgl.server.launch, minisgl.server.args, minisgl.config; "
            "print([m for m in sys.modules if m.startswith('minisgl.engine')])")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_a_rank_alone_joins_no_group() -> None:
    groups = join(DistributedInfo(0, 1), "", torch.device("cpu"))
    assert (groups.backend, groups.cpu, groups.world) == ("gloo", None, None)
    assert get_tp_info() == DistributedInfo(0, 1)


def _agree(rank: int, world_size: int) -> dict:
    # run_ranks joined this rank with `join`: its gloo group is the default one. Each rank's value has
    # its own length, longer or shorter than rank 0's
    mine = {"dtype": "float32" if rank == 0 else "bfloat16", "rank": rank, "note": "x" * (10 * rank)}
    return broadcast_json(mine, torch.distributed.group.WORLD)


def _precision_of_rank(rank: int, world_size: int, model_dir) -> tuple[str, str]:
    from minisgl.engine.precision import same_on_every_rank

    config = SchedulerConfig(model_path=model_dir, dtype=["float32", "bfloat16"][rank],
                             kv_cache_dtype=["float32", "bfloat16"][rank])
    agreed = same_on_every_rank(config, torch.distributed.group.WORLD)
    assert dataclasses.replace(agreed, dtype=config.dtype, kv_cache_dtype=config.kv_cache_dtype) == config
    return agreed.dtype, agreed.kv_cache_dtype


@pytest.mark.timeout(120)
def test_every_rank_takes_rank_0s_choice(tiny_model_dir) -> None:
    """What rank 0 measured for dtype "auto" holds on every rank: partial sums in two dtypes could not be added."""
    assert run_ranks(_agree, 3) == [{"dtype": "float32", "rank": 0, "note": ""}] * 3
    assert run_ranks(_precision_of_rank, 2, tiny_model_dir("llama")) == [("float32", "float32")] * 2


def test_batch_limits_follow_the_kv_pool_on_cuda_and_stay_the_measured_defaults_on_a_cpu(tmp_path) -> None:
    from minisgl.engine.sizing import with_batch_limits

    cuda = SchedulerConfig(model_path=tmp_path, device="cuda")

    def limits(config: SchedulerConfig, pool_tokens: int) -> tuple[int, int]:
        sized = with_batch_limits(config, pool_tokens)
        return sized.max_running_requests, sized.max_prefill_tokens

    assert limits(cuda, 1_090_000) == (256, 8192)  # Qwen3-0.6B shape on an H200
    assert limits(cuda, 860_000) == (208, 8192)  # Llama-3.1-8B on an H200: multiples of 8, the graph buckets
    assert limits(cuda, 30_000) == (8, 2048)  # an 8B model on a 24 GB GPU: the floors
    assert limits(SchedulerConfig(model_path=tmp_path, device="cpu"), 10**6) == (64, 2048)
    assert limits(dataclasses.replace(cuda, max_running_requests=32, max_prefill_tokens=512), 10**6) == (32, 512)
