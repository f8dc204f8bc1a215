"""Where the ranks of one TP group meet (chapters 03 and 12): the torch.distributed store, and the
network interface their gloo / NCCL sockets use.

- One machine: every rank of the run lives here, so nothing needs to listen beyond loopback. The
  store is a file in the run's ipc folder (`file://`), and the collectives use the loopback
  interface.
- Several machines (chapter 12): `tcp://host:port`, a TCP store that rank 0 serves on exactly that
  address (torch's own `tcp://` rendezvous would listen on every interface of the machine), and the
  collectives use the interface this machine reaches `host` through.

Left alone, gloo and NCCL open their sockets on the interface the hostname resolves to, which may
be neither (a public one, or 127.0.1.1 on many Debian machines).

How many CPU threads a rank takes depends on who else shares its machine's cores
(`nodes_on_this_machine`, `usable_cores`).
"""

from __future__ import annotations

import ipaddress
import os
import socket
from datetime import timedelta
from urllib.parse import urlsplit

import psutil
import torch.distributed as dist

LOOPBACK = "127.0.0.1"


def file_init_method(folder: str, name: str = "torch-store") -> str:
    """A store file `name` in `folder`, which must be fresh for every run (torch refuses to reuse one)."""
    return f"file://{os.path.join(folder, name)}"


def rendezvous(init_addr: str, rank: int, world_size: int, timeout: timedelta) -> dist.Store:
    """The group's store at `init_addr` (`file://path` or `tcp://host:port`), after pointing the
    collectives at the interface that leads to it."""
    if init_addr.startswith("file://"):
        bind_collectives_towards(LOOPBACK)
        return dist.FileStore(init_addr[len("file://"):], world_size)
    host, port = parse_tcp_addr(init_addr)
    bind_collectives_towards(host)
    return tcp_store(host, port, rank, world_size, timeout)


def parse_tcp_addr(addr: str) -> tuple[str, int]:
    """`host:port` or `tcp://host:port` (an IPv6 host in brackets: `[::1]:29500`) -> (host, port); a
    one-line ValueError quoting `addr` as given otherwise."""
    parts = urlsplit(addr if "://" in addr else f"tcp://{addr}")
    try:
        port = parts.port  # (a ValueError for a port that is not a number in 0..65535)
    except ValueError:
        port = None
    extra = parts.path or parts.query or parts.fragment or parts.username
    if parts.scheme != "tcp" or not parts.hostname or port is None or port == 0 or extra:
        raise ValueError(f"{addr!r} is not a host:port address with a port in 1..65535 "
                         "(e.g. 10.0.0.1:29500 or tcp://10.0.0.1:29500)")
    return parts.hostname, port


def tcp_store(host: str, port: int, rank: int, world_size: int, timeout: timedelta) -> dist.TCPStore:
    """A store on host:port: rank 0 serves it on that address only, the others connect (waiting up
    to `timeout` for rank 0)."""
    if rank != 0:
        return dist.TCPStore(host, port, world_size, is_master=False, timeout=timeout)
    try:
        listener = socket.create_server((host, port), backlog=max(128, world_size))
    except OSError as error:
        raise ValueError(f"cannot serve the rendezvous store on {host}:{port} ({error.strerror}); "
                         "pass another --dist-init-addr") from None
    fd = listener.detach()  # the store owns the socket from here
    try:
        return dist.TCPStore(host, port, world_size, is_master=True, timeout=timeout, wait_for_workers=False,
                             master_listen_fd=fd)
    except BaseException:
        os.close(fd)
        raise


def bind_collectives_towards(host: str) -> None:
    """Make gloo and NCCL (they read these when a group is created) open their sockets on the
    interface that leads to `host`, unless the user chose one (GLOO_SOCKET_IFNAME /
    NCCL_SOCKET_IFNAME already set)."""
    interface = interface_towards(host)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", interface)
    os.environ.setdefault("NCCL_SOCKET_IFNAME", interface)


def interface_towards(host: str) -> str:
    """The name of this machine's interface whose address it uses to reach `host` (`lo` on Linux,
    `lo0` on macOS, for 127.0.0.1). A UDP connect only asks the kernel for a route; nothing is sent."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        probe.connect((host, 9))
        local = probe.getsockname()[0]
    for name, addresses in psutil.net_if_addrs().items():
        if any(a.address.split("%")[0] == local for a in addresses):
            return name
    raise ValueError(f"no network interface holds {local}, this machine's address towards {host}")


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity (taskset, numactl, a container's cpuset),
    else every core of the machine."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def nodes_on_this_machine(init_addr: str, nnodes: int) -> int:
    """How many of a run's nodes share this machine's cores. Nodes that meet on a loopback address
    are all on this machine (no other machine can reach it: two launches on one laptop, as the tests
    run them); nodes that meet on a network address are taken to have a machine each. Two nodes on
    one machine over a network address should each be pinned to their own cores (taskset -c), which
    `usable_cores` then honours."""
    if nnodes == 1 or not init_addr or init_addr.startswith("file://"):
        return 1
    host, _ = parse_tcp_addr(init_addr)
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:  # a name: only "localhost" is certain without a DNS lookup
        loopback = host == "localhost"
    return nnodes if loopback else 1
