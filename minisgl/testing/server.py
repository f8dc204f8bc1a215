"""Run `python -m minisgl` as a real subprocess on a free port, for the server tests and the online
benchmark: start it, wait until `/health` answers (or it exits: then show why), stop it.

The server binds port 0 and the kernel picks the port, which is then read from the server's own
listening socket: no window in which a test running in parallel could take it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil


class ServerFailed(RuntimeError):
    """The server exited or did not become healthy; the message ends with its log."""


class RunningServer:
    def __init__(self, args: list[str], start_timeout_s: float = 240.0) -> None:
        fd, log_name = tempfile.mkstemp(prefix="minisgl-server-", suffix=".log")
        os.close(fd)
        self.log_path = Path(log_name)
        self._final_log: str | None = None
        self.command = [sys.executable, "-m", "minisgl", "--port", "0", *args]
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + start_timeout_s
            self.port = self._wait_listening(deadline)
            self.base_url = f"http://127.0.0.1:{self.port}"
            self._wait_healthy(deadline)
        except BaseException:
            self.stop()
            raise

    def _wait_listening(self, deadline: float) -> int:
        """The HTTP port: the server binds it first thing, before any child starts, so it is the
        listening socket with the lowest file descriptor (node 0 of a multi-node run listens for the
        other nodes too, later)."""
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ServerFailed(f"server exited with code {self.process.returncode}:\n{self.log()}")
            try:
                listening = psutil.Process(self.process.pid).net_connections(kind="tcp")
                ports = sorted((c.fd, c.laddr.port) for c in listening if c.status == psutil.CONN_LISTEN)
            except psutil.NoSuchProcess:
                ports = []
            if ports:
                return ports[0][1]
            time.sleep(0.1)
        raise ServerFailed(f"server did not listen within the start timeout:\n{self.log()}")

    def _wait_healthy(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ServerFailed(f"server exited with code {self.process.returncode}:\n{self.log()}")
            try:
                if httpx.get(f"{self.base_url}/health", timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise ServerFailed(f"server not healthy within the start timeout:\n{self.log()}")

    def log(self) -> str:
        if self._final_log is not None:
            return self._final_log
        return self.log_path.read_text(errors="replace")

    def child_pid(self, name: str) -> int:
        """The pid of child `name` (e.g. "minisgl-TP1-scheduler"), from the server's startup log."""
        for line in self.log().splitlines():
            if f"started {name} (pid " in line:
                return int(line.split("(pid ")[1].split(")")[0])  # "(pid 123)", maybe ": <its ack detail>"
        raise KeyError(f"no child {name} in the server log")

    def stop(self, timeout_s: float = 15.0) -> int:
        """SIGTERM, then SIGKILL after `timeout_s`; returns the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self._final_log is None:  # keep the text, drop the file: runs leave nothing in /tmp
            self._final_log = self.log_path.read_text(errors="replace")
            self.log_path.unlink(missing_ok=True)
        return self.process.returncode

    def __enter__(self) -> RunningServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
