"""What a sandboxed grader rank records about collectives (chapter 00 explains the grader).

While a learner's function runs, every collective it makes is logged with its group, and the dtype,
device and shape of the first tensor it hands over (the payload), whether it called torch.distributed directly or went through minisgl.distributed, so the
grader can check that the collective the chapter teaches is the one used, on the group it was
given. All job long, each rank also counts the torch.distributed collectives it enters in a small
file the grader maps (`progress`): when a job hangs, that names the rank that never joined the
collective another rank waits in.

This runs inside the learner's process, so what it reports is evidence, not proof: the grader
scores values it checks itself, and reads these counts only to explain a failure.
"""

from __future__ import annotations

import inspect
import mmap
import struct
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

TORCH_COLLECTIVES = (
    "broadcast", "all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "broadcast_object_list",
    "reduce", "reduce_scatter", "reduce_scatter_tensor", "scatter", "gather", "barrier", "send", "recv", "isend",
    "irecv", "all_to_all", "all_to_all_single",
)
SEAM_COLLECTIVES = ("all_reduce", "all_gather")
NOT_IN_A_COLLECTIVE = -1
SLOT = struct.Struct("<ii")  # per rank: collectives entered, index of the one it is in


def describe(api_index: int) -> str:
    return f"torch.distributed.{TORCH_COLLECTIVES[api_index]}"


def _first_tensor(value: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (list, tuple)) and value and isinstance(value[0], torch.Tensor):
        return value[0]
    return None


class Progress:
    """This rank's two counters in the file the grader reads (a file of SLOT per rank)."""

    def __init__(self, path: str | None, rank: int) -> None:
        self.offset = rank * SLOT.size
        self._map = None
        if path:
            with open(path, "r+b") as f:
                self._map = mmap.mmap(f.fileno(), 0)
        self.entered, self.current = 0, NOT_IN_A_COLLECTIVE

    def set(self, entered: int, current: int) -> None:
        self.entered, self.current = entered, current
        if self._map is not None:
            SLOT.pack_into(self._map, self.offset, entered, current)


class Recorder:
    """Installed once per grader rank, before any learner module is imported."""

    def __init__(self, progress: Progress, groups: dict[str, Any]) -> None:
        self.progress = progress
        self.group_names = {id(group): name for name, group in groups.items() if group is not None}
        self.log: list[list[str | None]] = []  # [api, group, dtype, device, shape "2,11"] per collective
        self.recording = False
        self._seam_depth = 0

    def name_group(self, name: str, group: Any) -> None:
        """A group made after install (child/jobs.py: Context.group) is logged by its name too."""
        self.group_names[id(group)] = name

    def start_job(self) -> None:
        self.log = []
        self.progress.set(0, NOT_IN_A_COLLECTIVE)

    def install(self) -> None:
        import torch.distributed as dist

        from minisgl.distributed.impl import DistributedCommunicator

        for index, name in enumerate(TORCH_COLLECTIVES):
            original = getattr(dist, name, None)
            if original is not None:
                setattr(dist, name, self._wrap_torch(index, original))
        for name in SEAM_COLLECTIVES:
            setattr(DistributedCommunicator, name, self._wrap_seam(name, getattr(DistributedCommunicator, name)))

    def _group_name(self, group: Any) -> str:
        import torch.distributed as dist

        if group is None or group is dist.group.WORLD:
            return self.group_names.get(id(dist.group.WORLD), "WORLD")
        return self.group_names.get(id(group), "another group")

    def _record(self, api: str, group: str, tensor: Any) -> None:
        if self.recording and self._seam_depth == 0:
            tensor = _first_tensor(tensor)
            if tensor is None:
                self.log.append([api, group, None, None, None])
            else:
                self.log.append([api, group, str(tensor.dtype).removeprefix("torch."), tensor.device.type,
                                 ",".join(str(size) for size in tensor.shape)])

    def _wrap_torch(self, index: int, original: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(original)

        def collective(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind_partial(*args, **kwargs)
            group = self._group_name(bound.arguments.get("group"))
            first = next(iter(bound.arguments.values()), None)
            self._record(describe(index), group, first)
            entered = self.progress.entered + 1
            self.progress.set(entered, index)
            try:
                return original(*args, **kwargs)
            finally:
                self.progress.set(entered, NOT_IN_A_COLLECTIVE)

        collective.__wrapped__ = original  # type: ignore[attr-defined]
        return collective

    def _wrap_seam(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        recorder = self

        def seam(self: Any, x: Any) -> Any:
            recorder._record(f"minisgl.distributed.{name}", "tp group", x)
            recorder._seam_depth += 1  # the torch.distributed call inside is the seam's, not the learner's
            try:
                return original(self, x)
            finally:
                recorder._seam_depth -= 1

        return seam

    @contextmanager
    def learner_calls(self) -> Iterator[None]:
        """Log the collectives made inside this block (the learner's function)."""
        self.recording = True
        try:
            yield
        finally:
            self.recording = False
