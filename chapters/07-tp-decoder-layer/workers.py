"""Code that runs inside each rank for chapter 07: a real engine serving one request while we
watch decoder layer 0's shapes and every collective of the forward pass."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from minisgl import SamplingParams
from minisgl.distributed import collective_counts, reset_collective_counts
from minisgl.layers import BaseOP
from minisgl.message import GenerateRequest
from minisgl.scheduler import LocalIO, Scheduler

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from course import CollectiveRecorder, engine_on_this_rank, op_names  # noqa: E402


def watch_shapes(layer: BaseOP, recorder: CollectiveRecorder, log: list[tuple]) -> None:
    """Wrap the forward of every leaf op under `layer` to log (name, input shapes, output shape,
    collectives so far). Only this instance changes; the class and the weights are untouched."""
    for name, op in _leaves(layer):

        def traced(*args, _forward=op.forward, _name=name, **kwargs):
            out = _forward(*args, **kwargs)
            shapes = [tuple(a.shape) for a in args if isinstance(a, torch.Tensor)]
            log.append((_name, shapes, tuple(out.shape), len(recorder.calls)))
            return out

        op.forward = traced


def _leaves(op: BaseOP, prefix: str = ""):
    """(dotted name, op) of every op under `op` that has no child ops."""
    children = list(op.named_children())
    if not children:
        yield prefix.rstrip("."), op
    for name, child in children:
        yield from _leaves(child, f"{prefix}{name}.")


def serve_one(rank: int, world_size: int, model_dir: Path, init_addr: str, prompt: list[int], max_tokens: int) -> dict:
    """Prefill + decode one greedy request; per step: collective counts; for the prefill: the
    recorded collectives and layer 0's shapes."""
    engine = engine_on_this_rank(rank, world_size, model_dir, init_addr)
    recorder = CollectiveRecorder.install(names=op_names(engine.model))
    shapes: list[tuple] = []
    watch_shapes(engine.model.model.layers[0], recorder, shapes)
    io = LocalIO()
    io.inbox.append(GenerateRequest(0, prompt, SamplingParams(temperature=0, max_tokens=max_tokens)))
    scheduler = Scheduler(engine.config, engine, io)
    counts = []
    while scheduler.has_work or io.inbox:
        reset_collective_counts()
        scheduler.step()
        counts.append(collective_counts())
        if len(counts) == 1:  # the prefill step
            prefill_calls = [(c.op, c.caller, c.shape, c.nbytes) for c in recorder.calls]
            prefill_shapes = list(shapes)
    engine.shutdown()
    return {
        "tokens": [t for out in io.outbox for t in out.token_ids],
        "counts per step": counts,
        "prefill collectives": prefill_calls,
        "layer 0 shapes": prefill_shapes,
    }
