"""One sandboxed worker: a rank of a task's pool, forked from the zygote. It joins the pool's
torch.distributed group (several ranks), installs the collectives recorder, then runs the jobs
the grader sends over its socket until the socket closes. Learner code runs only here."""

from __future__ import annotations

import os
import socket
import sys
from datetime import timedelta
from typing import Any

from . import jobs, wire
from .collectives import Progress, Recorder

PR_SET_PDEATHSIG, PR_SET_DUMPABLE = 1, 4
GROUP_TIMEOUT_S = 120


def prctl(option: int, value: int) -> None:
    """Linux prctl, best effort (nothing happens elsewhere)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def main(fd: int, spec: dict[str, Any]) -> None:
    """Serve jobs on the socket `fd`; never returns."""
    sock = socket.socket(fileno=fd)
    try:
        log = os.open(spec["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(log, 1)  # what the learner's code prints goes to this rank's log, never to the grader
        os.dup2(log, 2)
        prctl(PR_SET_PDEATHSIG, 9)  # SIGKILL when the zygote goes
        prctl(PR_SET_DUMPABLE, 1)
        sys.path[:0] = [spec["minisgl_dir"], spec["impl_dir"]]
        ctx = _setup(spec)
    except BaseException as error:  # noqa: BLE001 - reported to the grader, which names this rank
        wire.send(sock, {"kind": "failed", "message": f"{type(error).__name__}: {error}"[:2000]})
        os._exit(1)
    wire.send(sock, {"kind": "ready"})
    while True:
        try:
            request = wire.receive(sock)
        except wire.WireError:
            os._exit(0)  # the grader closed this pool
        reply = jobs.run(ctx, request)
        try:
            wire.send(sock, reply)
        except (OSError, TypeError, ValueError):
            os._exit(1)


def _setup(spec: dict[str, Any]) -> jobs.Context:
    import torch

    torch.set_num_threads(1)  # ranks share few cores
    rank, world_size = spec["rank"], spec["world_size"]
    device = torch.device("cpu")
    if spec["device_type"] == "cuda":
        device = torch.device("cuda", rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    groups: dict[str, Any] = {}
    if world_size > 1:
        import torch.distributed as dist

        from minisgl.distributed import enable_torch_distributed, set_tp_info

        dist.init_process_group(spec["backend"], init_method=spec["init_method"], rank=rank, world_size=world_size,
                                timeout=timedelta(seconds=GROUP_TIMEOUT_S))
        groups = _make_groups(rank, world_size, spec["backend"])
        set_tp_info(rank, world_size)
        enable_torch_distributed(dist.group.WORLD)
    recorder = Recorder(Progress(spec.get("progress"), rank), groups)
    recorder.install()  # before any learner module is imported
    roots = {spec["impl_dir"]: "", spec["minisgl_dir"]: ""}
    return jobs.Context(rank, world_size, device, groups, recorder, roots, spec["log"])


def _make_groups(rank: int, world_size: int, backend: str) -> dict[str, Any]:
    """The groups a job may hand out; every rank creates them, in the same order: WORLD, a gloo CPU
    group (WORLD itself under gloo), another gloo group of all ranks ("side"), and this rank's half
    of the ranks ("half", a group of one at world size 2)."""
    import torch.distributed as dist

    cpu = dist.new_group(backend="gloo") if backend == "nccl" else dist.group.WORLD
    side = dist.new_group(backend="gloo")
    half = None
    for members in (list(range(world_size // 2)), list(range(world_size // 2, world_size))):
        group = dist.new_group(members, backend="gloo")
        if rank in members:
            half = group
    return {"WORLD": dist.group.WORLD, "cpu": cpu, "side": side, "half": half}
