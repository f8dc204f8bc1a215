"""Keep a single machine's collectives off the network (chapter 03).

Every rank of a run lives on this machine, so nothing needs to listen beyond loopback: the
rendezvous is a file in the run's ipc folder (`file://`, no TCP store), and gloo and NCCL open their
own sockets on the loopback interface. Left alone they would pick the interface the hostname
resolves to, often a public one.
"""

from __future__ import annotations

import os
import socket

import psutil

LOOPBACK = "127.0.0.1"


def file_init_method(folder: str) -> str:
    """`init_method` for `torch.distributed.init_process_group`: a store file in `folder`, which must
    be fresh for every run (torch refuses to reuse one)."""
    return f"file://{os.path.join(folder, 'torch-store')}"


def bind_collectives_to_loopback() -> None:
    """Tell gloo and NCCL (read when a group is created) to use the loopback interface, unless the
    user chose one (GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME already set)."""
    interface = loopback_interface()
    os.environ.setdefault("GLOO_SOCKET_IFNAME", interface)
    os.environ.setdefault("NCCL_SOCKET_IFNAME", interface)


def loopback_interface() -> str:
    """The name of the interface that holds 127.0.0.1: `lo` on Linux, `lo0` on macOS."""
    for name, addresses in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address == LOOPBACK for a in addresses):
            return name
    return "lo"
