"""`python -m minisgl`: check the arguments, spawn every child process, wait for each one's ack
with a timeout, serve (HTTP or a shell), and bring everything down together (chapter 02).

The processes of one server at tp = 2 with two tokenizer workers, and who sends to whom:

    main (HTTP or shell) ──> tokenizer-0 ──┐
                         └─> tokenizer-1 ──┴─> TP0-scheduler ──broadcast──> TP1-scheduler
    main <── detokenizer <───────────────────────────────┘

Only rank 0 talks to the text processes; rank 1 learns every message from rank 0's broadcast.
If any child fails to start or dies later, the server says which one and exits non-zero; Ctrl-C or
SIGTERM stops every child within seconds, and each child also exits by itself if `main` dies.
"""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing as mp
import multiprocessing.connection
import os
import queue
import shutil
import signal
import threading
import time
from collections.abc import Callable
from multiprocessing.process import BaseProcess

import zmq

from minisgl.message import ShutdownRequest, encode_message
from minisgl.models.config import ModelError
from minisgl.tokenizer.process import run_detokenizer_process, run_tokenizer_process
from minisgl.utils import make_ipc_dir

from .args import ArgsError, ServerArgs, bind_http_socket, check_args
from .ranks import LaunchError, RankGroup, describe_exit, first_dead, stop_processes

logger = logging.getLogger("minisgl")

GRACEFUL_STOP_S = 3.0


class ChildDied(LaunchError):
    """A child process exited; `exitcode` is negative when a signal killed it."""

    def __init__(self, message: str, exitcode: int) -> None:
        super().__init__(message)
        self.exitcode = exitcode


class ServerProcesses:
    """The children of one server: the scheduler ranks, the tokenizer workers, the detokenizer,
    and the ipc:// addresses the main process uses to reach them."""

    def __init__(self, ranks: RankGroup, helpers: list[BaseProcess], acks: mp.Queue, ipc_dir: str) -> None:
        self.ranks = ranks
        self.helpers = helpers  # the tokenizer workers, then the detokenizer
        self._acks = acks  # ("ready" | "error", name, detail) from each helper
        self._ready: set[str] = set()
        self.ready = False  # every child acked
        self._ipc_dir = ipc_dir
        self.api_addr = _api_addr(ipc_dir)  # the main process PULLs TextOutputs here ...
        self.tokenizer_addrs = [_tokenizer_addr(ipc_dir, i) for i in range(len(helpers) - 1)]  # ... and PUSHes to these

    @classmethod
    def start(cls, args: ServerArgs) -> ServerProcesses:
        """Spawn every child, then wait for all acks; on any failure stop them all and raise
        `LaunchError` naming the child that failed."""
        ipc_dir = make_ipc_dir()
        detokenizer_addr = f"ipc://{ipc_dir}/detokenizer"
        # rank 0 pushes its TokenOutputs straight to the detokenizer, never back to main
        ranks = RankGroup.spawn(dataclasses.replace(args.scheduler, outputs_addr=detokenizer_addr))
        ctx = mp.get_context("spawn")
        acks: mp.Queue = ctx.Queue()
        model_path, scheduler_addr = args.scheduler.model_path, ranks.config.requests_addr
        helpers = [
            ctx.Process(target=run_tokenizer_process, name=f"minisgl-tokenizer-{i}", daemon=False,
                        args=(f"minisgl-tokenizer-{i}", model_path, _tokenizer_addr(ipc_dir, i),
                              scheduler_addr, detokenizer_addr, acks))
            for i in range(args.num_tokenizers)
        ]
        helpers.append(
            ctx.Process(target=run_detokenizer_process, name="minisgl-detokenizer", daemon=False,
                        args=("minisgl-detokenizer", model_path, detokenizer_addr, _api_addr(ipc_dir),
                              scheduler_addr, acks))
        )
        processes = cls(ranks, helpers, acks, ipc_dir)
        try:
            for process in helpers:
                process.start()
            processes.wait_ready(args.start_timeout_s)
        except BaseException:
            processes.shutdown()
            raise
        return processes

    @property
    def all(self) -> list[BaseProcess]:
        return [*self.ranks.processes, *self.helpers]

    def wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not self._poll_acks(wait_s=0.2):
            if time.monotonic() > deadline:
                waiting = [] if self.ranks.poll_acks() else ["the scheduler ranks"]
                waiting += [p.name for p in self.helpers if p.name not in self._ready]
                raise LaunchError(f"{', '.join(waiting)} did not start within {timeout_s:.0f} s (--start-timeout)")
            try:
                self.check_alive()
            except LaunchError:
                self._poll_acks()  # a child that failed said why just before exiting: prefer its words
                raise
        self.ready = True
        for process in self.all:
            logger.info("started %s (pid %d)", process.name, process.pid)

    def _poll_acks(self, wait_s: float = 0.0) -> bool:
        """Take the acks that arrived, waiting up to `wait_s` for one; True once every child is
        ready. An error ack raises `LaunchError` naming its child."""
        helpers_ready = len(self._ready) == len(self.helpers)
        ranks_ready = self.ranks.poll_acks(wait_s=wait_s if helpers_ready else 0.0)
        while len(self._ready) < len(self.helpers):
            try:
                status, name, detail = self._acks.get(timeout=wait_s) if wait_s else self._acks.get_nowait()
            except queue.Empty:
                break
            if status == "error":
                raise LaunchError(f"{name} failed to start: {detail}")
            self._ready.add(name)
            wait_s = 0.0
        return ranks_ready and len(self._ready) == len(self.helpers)

    def check_alive(self) -> None:
        """Raise `LaunchError` naming a child that exited (none ever should). When one death causes
        others (a rank killed by a signal makes its peers' collectives fail), name the killed one."""
        culprit = first_dead(self.all)
        if culprit is not None:
            raise ChildDied(describe_exit(culprit), culprit.exitcode)

    def shutdown(self, graceful: bool = True) -> None:
        """Stop every child. `graceful`: first ask the ranks to leave their loop (a ShutdownRequest
        that rank 0 broadcasts), so they exit cleanly; whatever still runs then gets SIGTERM."""
        if graceful and self.ready and all(p.is_alive() for p in self.ranks.processes):
            context = zmq.Context()
            sock = context.socket(zmq.PUSH)
            sock.setsockopt(zmq.LINGER, 1000)
            sock.connect(self.ranks.config.requests_addr)
            sock.send(encode_message(ShutdownRequest()))
            context.destroy(linger=1000)
            deadline = time.monotonic() + GRACEFUL_STOP_S
            for process in self.ranks.processes:
                process.join(max(0.0, deadline - time.monotonic()))
        stop_processes(self.all)  # SIGTERM to all at once, then wait: seconds, not seconds per child
        self.ranks.shutdown()
        shutil.rmtree(self._ipc_dir, ignore_errors=True)


def _api_addr(ipc_dir: str) -> str:
    return f"ipc://{ipc_dir}/api"


def _tokenizer_addr(ipc_dir: str, index: int) -> str:
    return f"ipc://{ipc_dir}/tokenizer-{index}"


class ChildWatcher(threading.Thread):
    """Sleeps until a child exits (the OS wakes it: no polling delay), then records which one and
    calls `on_failure`, which the serving loop sets to make itself return."""

    def __init__(self, processes: ServerProcesses) -> None:
        super().__init__(daemon=True, name="child-watcher")
        self.processes = processes
        self.on_failure: Callable[[str], None] = lambda reason: None
        self.failure: LaunchError | None = None
        self._wake_r, self._wake_w = os.pipe()  # stop() writes here to end the wait

    def run(self) -> None:
        ready = mp.connection.wait([p.sentinel for p in self.processes.all] + [self._wake_r])
        if self._wake_r in ready:
            return
        for process in self.processes.all:
            if process.sentinel in ready:
                process.join(1.0)  # its sentinel closes a moment before its exit code can be read
        try:
            self.processes.check_alive()
        except LaunchError as error:
            self.failure = error
            self.on_failure(str(error))

    def stop(self) -> None:
        os.write(self._wake_w, b"x")
        if self.is_alive():
            self.join()
        os.close(self._wake_r)
        os.close(self._wake_w)


class StopRequested(Exception):
    """SIGTERM arrived: stop like Ctrl-C does."""


_stop_signals: list[int] = []  # SIGINT / SIGTERM this process received


def _on_stop_signal(signum: int, frame: object) -> None:
    _stop_signals.append(signum)
    raise KeyboardInterrupt if signum == signal.SIGINT else StopRequested


def _is_real_failure(error: LaunchError) -> bool:
    """False for a child that died of the same SIGTERM / SIGINT that stops us: `kill -TERM -<pgid>`,
    systemd and Ctrl-C signal the whole process group at once, and that is a stop, not a crash."""
    by_stop_signal = isinstance(error, ChildDied) and error.exitcode in (-signal.SIGTERM, -signal.SIGINT)
    return not (by_stop_signal and _stop_signals)


def launch_server(args: ServerArgs) -> int:
    """Run the server until Ctrl-C / SIGTERM (exit code 0) or a failure (1; 2 for bad arguments).
    Every failure prints one line naming its cause."""
    try:
        args = check_args(args)
        sock = None if args.shell else bind_http_socket(args.host, args.port)
    except (ArgsError, ModelError) as error:
        _print_error(str(error))
        return 2
    signal.signal(signal.SIGINT, _on_stop_signal)
    signal.signal(signal.SIGTERM, _on_stop_signal)
    processes: ServerProcesses | None = None
    watcher: ChildWatcher | None = None
    failure: LaunchError | None = None
    try:
        config = args.scheduler
        logger.info("starting %s: tp=%d on %s, %d tokenizer(s)", args.served_model_name, config.tp_info.size,
                    config.device, args.num_tokenizers)
        processes = ServerProcesses.start(args)
        watcher = ChildWatcher(processes)
        if args.shell:
            from .shell import run_shell

            run_shell(args, processes, watcher)
        else:
            from .api_server import run_api_server

            run_api_server(args, processes, watcher, sock)
    except LaunchError as error:
        failure = error
    except (KeyboardInterrupt, StopRequested):
        pass  # a requested stop, or the watcher interrupting the shell: told apart below
    finally:
        # a second Ctrl-C must not cut the cleanup short and leave children behind
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if watcher is not None:
            watcher.stop()  # before the shutdown: the exits we cause are not failures
            failure = failure or watcher.failure
        if failure is not None and not _is_real_failure(failure):
            failure = None
        if processes is not None:
            processes.shutdown(graceful=failure is None)
        if sock is not None:
            sock.close()
    if failure is not None:
        _print_error(str(failure))
        return 1
    logger.info("stopped")
    return 0


def _print_error(message: str) -> None:
    import sys

    print(f"minisgl: error: {message}", file=sys.stderr, flush=True)
