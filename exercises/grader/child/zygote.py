"""The sandbox's zygote: one process, started by the grader as the sandbox's user with a clean
environment, that imports torch and the engine's third-party dependencies once and then forks a
worker per rank on request (importing torch takes seconds; a fork, milliseconds). It never imports
minisgl or learner code, so every worker starts clean.

    python -I -c 'import sys; sys.path.insert(0, HARNESS); from grader_child.zygote import main; main(FD, ...)'

Requests come over a SOCK_SEQPACKET socket: a JSON worker spec with the worker's socket attached
(SCM_RIGHTS); the reply is the worker's pid. The zygote exits when the grader's end closes.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import socket
import sys
import sysconfig

from .worker import PR_SET_DUMPABLE, PR_SET_PDEATHSIG, prctl

PRELOAD = ("torch", "torch.distributed", "numpy", "zmq", "safetensors", "gguf", "psutil", "msgpack")


def _scrub_paths(course_roots: list[str]) -> None:
    """Nothing of the course on sys.path but this harness: an editable install of the course (a
    .pth entry, a meta-path finder) must not lead a worker to the real minisgl or the grader. Where
    the grader runs as another user, those folders are unreadable anyway; this keeps a worker from
    finding them by accident (and keeps the process boundary honest where there is no other user)."""
    roots = tuple(os.path.realpath(root) + os.sep for root in course_roots)
    packages = tuple(os.path.realpath(p) + os.sep for p in sysconfig.get_paths().values())  # a venv inside the course

    def allowed(entry: str) -> bool:
        real = os.path.realpath(entry) + os.sep
        return bool(entry) and (real.startswith(packages) or not real.startswith(roots))

    sys.path[:] = [p for p in sys.path if allowed(p)]
    sys.meta_path[:] = [f for f in sys.meta_path if "__editable__" not in getattr(f, "__module__", "") + repr(f)]


def limit(nproc: int | None) -> None:
    """Caps that only make sense for a user of its own: processes (a fork bomb stops there), and no
    core files; file size for everyone (a runaway write stops at 1 GiB)."""
    import resource

    caps = {resource.RLIMIT_CORE: 0, resource.RLIMIT_FSIZE: 1 << 30}
    if nproc:
        caps[resource.RLIMIT_NPROC] = nproc
    for which, value in caps.items():
        soft, hard = resource.getrlimit(which)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(which, (value, value if hard == resource.RLIM_INFINITY else hard))


def main(control_fd: int, course_roots: list[str], nproc: int | None = None) -> None:
    _scrub_paths(course_roots)
    limit(nproc)
    prctl(PR_SET_PDEATHSIG, 9)  # gone with the grader
    prctl(PR_SET_DUMPABLE, 0)  # no sandboxed process may trace this one and change what it forks
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    control = socket.socket(fileno=control_fd)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # workers are reaped by the kernel
    control.send(json.dumps({"ready": os.getpid()}).encode())
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(control, 1 << 16, 1)
        except OSError:
            os._exit(0)
        if not data:
            os._exit(0)  # the grader is gone
        if not fds:
            continue
        pid = os.fork()
        if pid == 0:
            try:
                control.close()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                os.setsid()  # a process group of its own: the grader kills it with everything it started
                from .worker import main as serve

                serve(fds[0], json.loads(data))
            finally:
                os._exit(1)
        os.close(fds[0])
        control.send(json.dumps({"pid": pid}).encode())
