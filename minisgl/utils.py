"""Small helpers shared by the launcher, the model cache and the tests."""

from __future__ import annotations

import os
import socket
from pathlib import Path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def minisgl_cache_dir() -> Path:
    """Root of everything minisgl generates: `$MINISGL_CACHE_DIR`, else `~/.cache/minisgl`."""
    return Path(os.environ.get("MINISGL_CACHE_DIR", Path.home() / ".cache" / "minisgl"))
