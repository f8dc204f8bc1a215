"""Small helpers shared by the launcher, the model cache and the tests."""

from __future__ import annotations

import os
import random
import socket
from pathlib import Path

_LOWEST_PICKED_PORT = 20000
_PORT_PICKER = random.SystemRandom()  # not `random`'s seeded state: two processes never pick alike by seed


def ephemeral_ports_start() -> int:
    """First port of the range the kernel hands to outgoing connections (Linux: 32768 by default)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _all_free(first: int, count: int) -> bool:
    """Whether `count` ports from `first` on can all be bound on 127.0.0.1 right now."""
    held: list[socket.socket] = []
    try:
        for port in range(first, first + count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            held.append(sock)
            sock.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        for sock in held:
            sock.close()


def free_port(count: int = 1) -> int:
    """The first of `count` consecutive TCP ports on 127.0.0.1 that nothing listens on right now.

    Picked at random below the kernel's ephemeral range: a port in that range can be handed to any
    outgoing connection (gloo's, an HTTP client's) between this check and the server's bind, which
    matters most for the ports *after* the first that a multi-node launch also takes (node 0 listens
    on dist-init port + 1 and + 2)."""
    low, high = _LOWEST_PICKED_PORT, ephemeral_ports_start() - count
    if high <= low:  # an unusual ephemeral range: any unprivileged port, still checked
        low, high = 1024, 65536 - count
    for _ in range(1000):
        first = _PORT_PICKER.randint(low, high)
        if _all_free(first, count):
            return first
    raise RuntimeError(f"no {count} consecutive free ports in {low}..{high + count - 1}")


def minisgl_cache_dir() -> Path:
    """Root of everything minisgl generates: `$MINISGL_CACHE_DIR`, else `~/.cache/minisgl`."""
    return Path(os.environ.get("MINISGL_CACHE_DIR", Path.home() / ".cache" / "minisgl"))
