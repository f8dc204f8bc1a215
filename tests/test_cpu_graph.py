"""CPU graphs (minisgl/kernel/cpu/graph.py, minisgl/engine/cpu_graph.py): what capture lets through
and what it refuses, replays that compute on new inputs, and an engine whose decode steps replay
recorded C calls giving the very logits and tokens of its eager forward."""

from __future__ import annotations

import logging

import pytest
import torch
import torch.nn.functional as F
from gguf import GGMLQuantizationType

from minisgl import LLM, SamplingParams
from minisgl.core import Req
from minisgl.config import EngineConfig
from minisgl.engine.engine import Engine
from minisgl.kernel.cpu import cpu_kernels
from minisgl.kernel.cpu.graph import NotCapturable, capture
from minisgl.layers.amx_tiles import amx_tiles_available
from minisgl.scheduler.batch import make_decode_batch, make_prefill_batch
from minisgl.server.args import ArgsError, check_args, parse_args
from minisgl.testing.tiny_gguf import make_tiny_gguf_model

needs_kernels = pytest.mark.skipif(cpu_kernels() is None, reason="no working C compiler here: no C kernels to record")
TINY = "llama-tied"  # tied Q8_0 embedding, 6 heads / 3 KV heads, like SmolLM2


@pytest.fixture(scope="module")
def q4_model(tmp_path_factory: pytest.TempPathFactory):
    return make_tiny_gguf_model(TINY, tmp_path_factory.mktemp("tiny-gguf") / "q4_1", GGMLQuantizationType.Q4_1)


# ---- capture ------------------------------------------------------------------------------------

def test_capture_lets_views_and_allocations_through_and_keeps_what_it_allocated() -> None:
    x = torch.randn(4, 6)
    with capture() as calls:
        first, second = x.split([2, 4], dim=-1)
        y = second.view(4, 2, 2).transpose(0, 1).to(torch.float32)  # a `.to` that changes nothing
        fresh = torch.empty(4, 6)
    assert y.data_ptr() == second.data_ptr() and first.shape == (4, 2)
    assert any(t.data_ptr() == fresh.data_ptr() for t in calls.tensors)  # kept alive for the replays
    assert calls.calls == []  # no C kernel was called


@pytest.mark.parametrize("compute", [
    lambda x: x + 1,  # a new tensor
    lambda x: x.add_(1),  # in place
    lambda x: x.to(torch.float64),  # a conversion that copies
    lambda x: x.t().contiguous(),  # a copy that looks like a layout change
    lambda x: F.linear(x, torch.eye(6)),
], ids=["add", "add_", "to_float64", "contiguous", "linear"])
def test_capture_refuses_any_pytorch_computation(compute) -> None:
    x = torch.randn(4, 6)
    with pytest.raises(NotCapturable, match="computes outside minisgl's C kernels"):
        with capture():
            compute(x)


def test_captures_do_not_nest() -> None:
    with capture():
        with pytest.raises(RuntimeError, match="already running"):
            with capture():
                pass


@needs_kernels
def test_a_replay_computes_the_recorded_calls_on_the_buffers_new_contents() -> None:
    kernels = cpu_kernels()
    x, residual, weight = torch.randn(3, 64), torch.randn(3, 64), torch.rand(64) + 0.5
    with capture() as calls:
        normed, summed = kernels.rms_norm(x, weight, 1e-6, residual)
        gate_up = torch.empty(3, 128)
        activated = kernels.silu_and_mul(gate_up)
    assert [function.__name__ for function, _ in calls.calls] == ["rms_norm", "silu_and_mul"]
    x.copy_(torch.randn(3, 64))  # a new step's inputs, in the same buffers
    gate_up.copy_(torch.randn(3, 128))
    calls.replay()
    expected, expected_sum = kernels.rms_norm(x, weight, 1e-6, residual)
    assert torch.equal(normed, expected) and torch.equal(summed, expected_sum)  # the same C function on the same data
    torch.testing.assert_close(activated, F.silu(gate_up[:, :64]) * gate_up[:, 64:])


@needs_kernels
def test_the_embedding_kernel_is_f_embedding_and_refuses_ids_outside_the_table() -> None:
    table = torch.randn(10, 8)
    ids = torch.tensor([3, 0, 9, 3])
    assert torch.equal(cpu_kernels().embedding(ids, table), F.embedding(ids, table))
    with pytest.raises(IndexError, match="1 token id"):
        cpu_kernels().embedding(torch.tensor([1, 10]), table)
    with capture() as calls:
        cpu_kernels().embedding(ids, table)
    ids[1] = -1  # a bad id arriving in a later step's buffer
    with pytest.raises(RuntimeError, match="embedding refused 1"):
        calls.replay()


# ---- the engine ---------------------------------------------------------------------------------

def engine_for(model_dir, **overrides) -> Engine:
    config = dict(dtype="float32", quantization="gguf", max_quantized_rows=8, num_pages=256, page_size=4,
                  max_running_requests=8, cpu_threads=2, progress=False)
    return Engine(EngineConfig(model_dir, **{**config, **overrides}))


def decode_both_ways(engine: Engine, prompts: list[list[int]], steps: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Prefill `prompts`, then decode `steps` steps, each step once eagerly and once through the
    CPU graphs (a capture on each batch size's first step, replays after): (eager, graph) logits.
    Running a step twice writes the same K/V into the same slots, so both see the same cache."""
    reqs = []
    for uid, prompt in enumerate(prompts):
        req = Req(uid, prompt, SamplingParams(temperature=0), len(prompt) + steps + 1)
        req.pages = engine.kv_pool.allocator.allocate(engine.kv_pool.pages_for(req.max_total_len))
        reqs.append(req)
    first = engine.forward_logits(make_prefill_batch(reqs, [len(p) for p in prompts], engine.kv_pool, engine.device))
    for req, logits in zip(reqs, first):
        req.cached_len = len(req.input_ids)
        req.output_ids.append(int(logits.argmax()))
    graphs, pairs = engine.cpu_graphs, []
    for step in range(steps):
        running = reqs[: max(1, len(reqs) - step % 2)]  # alternate two batch sizes: captures and replays of each
        batch = make_decode_batch(running, engine.kv_pool, engine.device)
        engine.cpu_graphs = None
        eager = engine.forward_logits(batch)
        engine.cpu_graphs = graphs
        graph = engine.forward_logits(batch)
        pairs.append((eager, graph))
        for req, logits in zip(running, graph):
            req.cached_len = req.total_len
            req.output_ids.append(int(logits.argmax()))
    return pairs


@needs_kernels
@pytest.mark.parametrize("kv_cache_dtype", ["auto", "bfloat16"])
def test_graph_replays_give_the_eager_logits_step_after_step(q4_model, kv_cache_dtype: str) -> None:
    engine = engine_for(q4_model, kv_cache_dtype=kv_cache_dtype)
    try:
        assert engine.kv_pool.k_buffer.dtype == (torch.bfloat16 if kv_cache_dtype == "bfloat16" else torch.float32)
        pairs = decode_both_ways(engine, [[1, 5, 9, 200, 17], [1, 300, 301, 302, 9, 9, 9, 40, 7], [1, 77]], steps=6)
        assert sorted(engine.cpu_graphs.graphs) == [2, 3]  # one recording per batch size, replayed twice each
        for eager, graph in pairs:
            # the same C functions on the same data and shapes: the same bits (the graph skips only Python)
            assert torch.equal(eager, graph)
        assert engine.cpu_graphs.max_bs == 8  # nothing was refused
    finally:
        engine.shutdown()


@needs_kernels
def test_a_step_with_pytorch_work_runs_eagerly_and_caps_the_graphs(q4_model, caplog: pytest.LogCaptureFixture) -> None:
    # Batches above 2 rows take the dense fp32 weights (oneDNN, a PyTorch op): not capturable. By
    # default the graphs stop at that row limit; asked for more, capture finds it out.
    default = engine_for(q4_model, max_quantized_rows=2)
    try:
        assert default.cpu_graphs.max_bs == 2
    finally:
        default.shutdown()
    engine = engine_for(q4_model, max_quantized_rows=2, cpu_graph_max_bs=8)
    try:
        with caplog.at_level(logging.INFO, logger="minisgl.engine.cpu_graph"):
            pairs = decode_both_ways(engine, [[1, 5, 9], [1, 300, 301, 302], [1, 77, 78]], steps=4)
        assert "decode batches of 3 or more requests run eagerly" in caplog.text
        assert engine.cpu_graphs.max_bs == 2 and sorted(engine.cpu_graphs.graphs) == [2]
        for eager, graph in pairs:
            assert torch.equal(eager, graph)
    finally:
        engine.shutdown()


@needs_kernels
@pytest.mark.skipif(not amx_tiles_available(), reason="no AMX-BF16 here: bf16 matmuls are oneDNN's (PyTorch ops)")
@pytest.mark.parametrize("quantization", ["gguf", "none"])
def test_with_bf16_matmuls_on_amx_tiles_every_batch_is_all_c_calls(q4_model, quantization: str) -> None:
    # batches above 2 rows (or every batch, without GGUF weights) multiply on AMX tiles: C calls too
    engine = engine_for(q4_model, quantization=quantization, max_quantized_rows=2 if quantization == "gguf" else None,
                        matmul_dtype="bfloat16")
    try:
        assert engine.cpu_graphs.max_bs == 8
        pairs = decode_both_ways(engine, [[1, 5, 9], [1, 300, 301, 302], [1, 77, 78]], steps=4)
        assert sorted(engine.cpu_graphs.graphs) == [2, 3] and engine.cpu_graphs.max_bs == 8  # nothing refused
        for eager, graph in pairs:
            assert torch.equal(eager, graph)
    finally:
        engine.shutdown()


@needs_kernels
def test_graphs_are_off_where_a_step_cannot_be_all_c_calls(q4_model) -> None:
    off = (dict(cpu_graph_max_bs=0), dict(quantization="none"), dict(dtype="bfloat16"), dict(deterministic=True))
    for overrides in off:  # switched off; dense matmuls (PyTorch ops); no C kernels for bf16; its own attention
        engine = engine_for(q4_model, **overrides)
        try:
            assert engine.cpu_graphs is None, overrides
        finally:
            engine.shutdown()


@needs_kernels
@pytest.mark.parametrize("overlap", [False, True], ids=["plain", "overlap"])
def test_generated_tokens_are_the_same_with_and_without_graphs(q4_model, overlap: bool) -> None:
    prompts = [[1, 5, 9, 200, 17], [1, 300, 301, 302, 9, 9, 9, 40], [1, 77]]
    params = [SamplingParams(temperature=0, max_tokens=n, ignore_eos=True) for n in (9, 4, 12)]  # sizes 3, 2, 1
    tokens = {}
    for graphs in (0, None):
        with LLM(q4_model, dtype="float32", quantization="gguf", max_quantized_rows=8, num_pages=256, cpu_threads=2,
                 progress=False, cpu_graph_max_bs=graphs, overlap_schedule=overlap) as llm:
            tokens[graphs] = [o.token_ids for o in llm.generate(prompts, params)]
    assert tokens[None] == tokens[0]
    assert [len(t) for t in tokens[None]] == [9, 4, 12]


def test_a_negative_cpu_graph_size_is_a_clear_error(q4_model) -> None:
    with pytest.raises(ArgsError, match="--cpu-graph-max-bs must be >= 0"):
        check_args(parse_args(["--model", str(q4_model), "--cpu-graph-max-bs", "-1"]))
