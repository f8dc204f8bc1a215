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

import logging
import signal
from dataclasses import dataclass
from multiprocessing.process import BaseProcess

from minisgl.message import IpcAddresses
from minisgl.models.config import ModelError
from minisgl.process import ChildDied, ChildGroup, ChildWatcher, LaunchError
from minisgl.scheduler.process import shut_down_ranks, spawn_ranks
from minisgl.tokenizer.process import run_detokenizer, run_tokenizer

from .args import ArgsError, ServerArgs, bind_http_socket, check_args

logger = logging.getLogger("minisgl")

GRACEFUL_STOP_S = 3.0


@dataclass
class ServerProcesses:
    """The children of one server (the scheduler ranks, the tokenizer workers, the detokenizer)
    and the addresses of their sockets: the main process pushes to `addrs.tokenizers` and pulls
    `TextOutput`s from `addrs.api`."""

    group: ChildGroup
    addrs: IpcAddresses
    ranks: list[BaseProcess]

    @classmethod
    def start(cls, args: ServerArgs) -> ServerProcesses:
        """Spawn every child, then wait for all acks (model and tokenizer loading overlap); on any
        failure stop them all and raise `LaunchError` naming the child that failed."""
        group = ChildGroup()
        addrs = IpcAddresses.in_dir(group.ipc_dir, args.num_tokenizers)
        model_path = args.scheduler.model_path
        try:
            ranks = spawn_ranks(group, args.scheduler, addrs)
            for i in range(args.num_tokenizers):
                group.spawn(f"minisgl-tokenizer-{i}", run_tokenizer, i, model_path, addrs)
            group.spawn("minisgl-detokenizer", run_detokenizer, model_path, addrs)
            group.wait_ready(args.start_timeout_s, fix="raise --start-timeout")
        except BaseException:
            group.stop()  # (wait_ready stops a group that fails; a second stop does nothing)
            raise
        return cls(group, addrs, ranks)

    def shutdown(self, graceful: bool = True) -> None:
        """Stop every child. `graceful`: first ask the ranks to leave their loop (a ShutdownRequest
        that rank 0 broadcasts), so they exit cleanly; whatever still runs then gets SIGTERM."""
        if graceful and all(p.is_alive() for p in self.ranks):
            shut_down_ranks(self.ranks, self.addrs, GRACEFUL_STOP_S)
        self.group.stop()  # SIGTERM to all at once, then wait: seconds, not seconds per child


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
        watcher = ChildWatcher(processes.group)
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
