"""Code that runs inside each rank for chapter 10: PyNCCL's all-reduce recorded into a CUDA graph and
replayed on new inputs, and the same capture tried with a gloo collective (one GPU per rank)."""

from __future__ import annotations

import torch
import torch.distributed as dist


def collectives_in_a_graph(rank: int, world_size: int) -> dict:
    """Capture `all_reduce(x * 2)` once through PyNCCL, replay it on two inputs; then try to capture
    a gloo all-reduce of a CUDA tensor and report what happens. run_ranks made the gloo group."""
    from minisgl.distributed.pynccl import PyNCCLCommunicator

    device = torch.device("cuda", rank)
    torch.cuda.set_device(device)
    comm = PyNCCLCommunicator(dist.group.WORLD, device)  # rank 0's unique id travels over gloo
    report: dict = {"nccl": comm.nccl.version()}
    graph = torch.cuda.CUDAGraph()
    try:
        static = torch.zeros(4, device=device)  # the graph's input: replays read whatever it holds
        comm.all_reduce(static * 2)  # warm up outside the graph, as before any capture
        with torch.cuda.graph(graph):
            out = comm.all_reduce(static * 2)  # a multiply kernel and ncclAllReduce, both recorded
        replays = []
        for value in (1.0, 10.0):
            static.fill_(value * (rank + 1))
            graph.replay()
            replays.append(out.tolist())
        report["pynccl replays"] = replays
    finally:
        del graph  # a graph holding NCCL work goes before its communicator
        comm.close()
    report["gloo capture"] = _try_gloo_capture(device)
    return report


def _try_gloo_capture(device: torch.device) -> str:
    """gloo reduces on the CPU: a CUDA tensor is copied to the host and back, outside any stream."""
    x = torch.ones(4, device=device)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            dist.all_reduce(x)
    except Exception as error:  # noqa: BLE001 - the point is to show whichever error capture raises
        torch.cuda.synchronize(device)
        return f"refused: {type(error).__name__}: {str(error).splitlines()[0][:120]}"
    return "captured without an error, but the graph holds no reduction: replaying it sums nothing"
