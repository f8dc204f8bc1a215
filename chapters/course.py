"""Helpers the chapter notebooks share: `run_ranks` (real gloo ranks whose results come back by
value), a communication plugin that records every collective, and `save_figure`, which keeps the
lesson pages' pictures in step with the notebooks.

Code that runs inside spawned rank processes must be importable (spawn cannot send a function
defined in a notebook cell), so each chapter keeps its rank functions in a `workers.py` next to
its notebook, and the pieces they share live here. Notebooks reach this file with
`sys.path.insert(0, "..")`.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from minisgl.distributed import DistributedCommunicator, DistributedImpl, DistributedInfo, destroy_distributed
from minisgl.engine.engine import Engine
from minisgl.layers import BaseOP, OPList
from minisgl.scheduler import SchedulerConfig
from minisgl.testing.multiprocess import run_ranks  # noqa: F401 - the notebooks import it from here

FIGURE_ENV = "MINISGL_WRITE_FIGURES"  # `make figures` sets it; a learner's run never rewrites tracked files


def save_figure(fig, name: str) -> None:
    """Write `fig` to figures/<name>.png next to the notebook when MINISGL_WRITE_FIGURES=1.

    The lesson pages embed these files, so the site shows the same pictures the notebook draws.
    """
    if os.environ.get(FIGURE_ENV) != "1":
        return
    out = Path("figures") / f"{name}.png"
    out.parent.mkdir(exist_ok=True)
    fig.savefig(out, dpi=90, bbox_inches="tight", metadata={"Software": None})


def engine_on_this_rank(rank: int, world_size: int, model_dir: Path, init_addr: str, **overrides: Any) -> Engine:
    """Build minisgl's Engine inside a `run_ranks` rank, exactly as a scheduler process does.

    run_ranks has already joined this process to a gloo group, and the Engine joins its own
    (chapter 03), so the first one is dropped. `init_addr` must be the same on every rank.
    """
    destroy_distributed()
    config = SchedulerConfig(
        model_path=Path(model_dir), tp_info=DistributedInfo(rank, world_size), dist_init_addr=init_addr,
        **{"dtype": "float32", "num_pages": 1024, "progress": False, "dist_timeout_s": 30.0, **overrides},
    )
    return Engine(config)


@dataclass
class Call:
    """One collective as it passed through the seam."""

    op: str  # "all_reduce" | "all_gather"
    caller: str  # dotted name of the layer that called it, e.g. "model.layers.0.mlp.down_proj"
    shape: tuple[int, ...]  # the local tensor handed to the collective
    nbytes: int
    tensor: torch.Tensor | None = None  # a copy of the input, when asked for


def op_names(model: BaseOP, prefix: str = "") -> dict[int, str]:
    """id(layer) -> its dotted name in the state dict, for every layer under `model`."""
    names = {id(model): prefix.rstrip(".")}
    children = enumerate(model) if isinstance(model, OPList) else model.named_children()
    for name, child in children:
        names.update(op_names(child, f"{prefix}{name}."))
    return names


class CollectiveRecorder:
    """A plugin for `DistributedCommunicator.plugins`: log the call, then let the plugin below run it.

    Because the last plugin wins, appending a recorder puts it in front of gloo (or NCCL) without
    the layers noticing: the same seam PyNCCL uses to replace torch.distributed on GPUs.
    """

    def __init__(self, inner: DistributedImpl, names: dict[int, str] | None = None, keep_tensors: bool = False):
        self.inner = inner
        self.names = names or {}
        self.keep_tensors = keep_tensors
        self.calls: list[Call] = []

    @classmethod
    def install(cls, names: dict[int, str] | None = None, keep_tensors: bool = False) -> CollectiveRecorder:
        """Put a recorder on top of the active plugin (call after the TP group exists)."""
        recorder = cls(DistributedCommunicator.plugins[-1], names, keep_tensors)
        DistributedCommunicator.plugins.append(recorder)
        return recorder

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        self._record("all_reduce", x)
        return self.inner.all_reduce(x)

    def all_gather(self, x: torch.Tensor) -> torch.Tensor:
        self._record("all_gather", x)
        return self.inner.all_gather(x)

    def _record(self, op: str, x: torch.Tensor) -> None:
        copy = x.detach().clone() if self.keep_tensors else None
        self.calls.append(Call(op, self._caller(), tuple(x.shape), x.numel() * x.element_size(), copy))

    def _caller(self) -> str:
        """The nearest layer on the call stack: the `self` of the first BaseOP method found."""
        frame = inspect.currentframe()
        while frame is not None:
            owner = frame.f_locals.get("self")
            if isinstance(owner, BaseOP):
                return self.names.get(id(owner), type(owner).__name__)
            frame = frame.f_back
        return "?"


def trace_events(trace: dict[str, Any], process: str | None = None, name: str | None = None,
                 cat: str | None = None) -> list[dict[str, Any]]:
    """The events of a merged trace (`minisgl.trace.load`) that match, in time order, each with its
    track's name as `process` and its times in ms (`start`, `end`)."""
    tracks = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"}
    found = []
    for e in trace["traceEvents"]:
        if e["ph"] == "M" or (name and e["name"] != name) or (cat and e["cat"] != cat):
            continue
        if process and tracks[e["pid"]] != process:
            continue
        start = e["ts"] / 1000
        found.append({**e, "process": tracks[e["pid"]], "start": start, "end": start + e.get("dur", 0.0) / 1000})
    return sorted(found, key=lambda e: e["start"])
