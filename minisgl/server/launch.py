"""`python -m minisgl`: check the arguments, spawn every child process, wait for each one's ack
with a timeout, serve (HTTP or a shell), and bring everything down together (chapter 02).

The processes of one server at tp = 2 with two tokenizer workers, and who sends to whom:

    main (HTTP or shell) ──> tokenizer-0 ──┐
                         └─> tokenizer-1 ──┴─> TP0-scheduler ──broadcast──> TP1-scheduler
    main <── detokenizer <───────────────────────────────┘

Only rank 0 talks to the text processes; rank 1 learns every message from rank 0's broadcast.
If any child fails to start or dies later, the server says which one and exits non-zero; Ctrl-C or
SIGTERM stops every child within seconds, and each child also exits by itself if `main` dies.

Across machines (chapter 12), node 0 runs all of the above with its share of the ranks; every other
node runs `launch_node`: its ranks and nothing else, linked to node 0's launcher (`process/nodes.py`),
until node 0 ends the run (its ranks then exit cleanly) or one side goes away (the other stops with
a line naming it). With data parallelism, a DP controller stands where rank 0 was, in front of the
replicas (`scheduler/data_parallel.py`).
"""

from __future__ import annotations

import dataclasses
import logging
import signal
import socket
import time
from dataclasses import dataclass
from multiprocessing.process import BaseProcess

from minisgl.config import SchedulerConfig
from minisgl.distributed.rendezvous import parse_tcp_addr
from minisgl.message import IpcAddresses
from minisgl.process import ChildDied, ChildGroup, ChildWatcher, LaunchError
from minisgl.process.nodes import (
    NODE_PORT_OFFSET,
    accept_nodes,
    connect_to_node0,
    listen_for_nodes,
    run_id,
    say_stop,
)
from minisgl.scheduler.data_parallel import spawn_schedulers
from minisgl.scheduler.process import shut_down_ranks, spawn_ranks
from minisgl.tokenizer.process import run_detokenizer, run_tokenizer
from minisgl.trace import TRACE

from .args import ServerArgs

logger = logging.getLogger("minisgl")

GRACEFUL_STOP_S = 3.0
NODE_STOP_S = 30.0  # how long node r's ranks get to exit once node 0 ended the run (then SIGTERM)


@dataclass
class ServerProcesses:
    """The children of one server (the scheduler ranks, the tokenizer workers, the detokenizer)
    and the addresses of their sockets: the main process pushes to `addrs.tokenizers` and pulls
    `TextOutput`s from `addrs.api`. In a multi-node run, the links to the other nodes' launchers."""

    group: ChildGroup
    addrs: IpcAddresses
    ranks: list[BaseProcess]
    links: dict[str, socket.socket]

    @classmethod
    def start(cls, args: ServerArgs) -> ServerProcesses:
        """Spawn every child, then wait for all acks (model and tokenizer loading overlap); on any
        failure stop them all and raise `LaunchError` naming the child that failed."""
        config = args.scheduler
        group = ChildGroup(config.trace_dir)
        addrs = node_addresses(group, config, args.num_tokenizers)
        model_path = config.model_path
        listener = None
        try:
            if config.nnodes > 1:
                host, port = parse_tcp_addr(config.dist_init_addr)
                listener = listen_for_nodes(host, port + NODE_PORT_OFFSET)
            ranks = spawn_schedulers(group, config, addrs)
            for i in range(args.num_tokenizers):
                group.spawn(f"minisgl-tokenizer-{i}", run_tokenizer, i, model_path, addrs)
            group.spawn("minisgl-detokenizer", run_detokenizer, model_path, addrs)
            links = accept_nodes(listener, config.nnodes, node_run_id(config), args.start_timeout_s) if listener else {}
            group.wait_ready(args.start_timeout_s, fix="raise --start-timeout")
        except BaseException:
            group.stop()  # (wait_ready stops a group that fails; a second stop does nothing)
            if listener is not None:
                listener.close()
            raise
        return cls(group, addrs, ranks, links)

    def shutdown(self, graceful: bool = True) -> None:
        """Stop every child. `graceful`: first ask the ranks to leave their loop (a ShutdownRequest
        that rank 0 broadcasts), so they exit cleanly; whatever still runs then gets SIGTERM."""
        if graceful and all(p.is_alive() for p in self.ranks):
            say_stop(self.links)  # the other nodes: what follows is the end of the run, not a crash
            shut_down_ranks(self.ranks, self.addrs, GRACEFUL_STOP_S)
        self.group.stop()  # SIGTERM to all at once, then wait: seconds, not seconds per child
        for link in self.links.values():
            link.close()


def node_addresses(group: ChildGroup, config: SchedulerConfig, num_tokenizers: int = 0) -> IpcAddresses:
    """The run's addresses, in `group`'s folder; across machines, rank 0 publishes on node 0's
    dist-init host, the port after the store's: the one socket the other nodes reach."""
    addrs = IpcAddresses.in_dir(group.ipc_dir, num_tokenizers)
    if config.nnodes == 1:
        return addrs
    host, port = parse_tcp_addr(config.dist_init_addr)
    return dataclasses.replace(addrs, broadcast=f"tcp://{host}:{port + 1}")


def node_run_id(config: SchedulerConfig) -> str:
    """What every node of a run must agree on, digested for the node links' hello (`nodes.run_id`):
    the address, the layout, and the model's config (its folder may differ from machine to machine)."""
    return run_id(parse_tcp_addr(config.dist_init_addr), config.nnodes, config.tp_info.size, config.pp_info.size,
                  (config.model_path / "config.json").read_bytes())


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


def launch_server(args: ServerArgs, sock: socket.socket | None) -> int:
    """Run the server until Ctrl-C / SIGTERM (exit code 0) or a failure (1). `args` and `sock` come
    from `check_and_bind` (whose failures are the exit code 2). Every failure prints one line naming
    its cause."""
    if args.node_rank > 0:
        return launch_node(args)
    signal.signal(signal.SIGINT, _on_stop_signal)
    signal.signal(signal.SIGTERM, _on_stop_signal)
    if args.scheduler.trace_dir is not None:
        TRACE.start(args.scheduler.trace_dir, "minisgl-server")
    processes: ServerProcesses | None = None
    watcher: ChildWatcher | None = None
    failure: LaunchError | None = None
    try:
        config = args.scheduler
        logger.info("starting %s: tp=%d%s%s%s on %s, dtype %s, %s collectives, %d tokenizer(s)",
                    args.served_model_name, config.tp_info.size,
                    f" x pp={config.pp_info.size}" if config.pp_info.size > 1 else "",
                    f" x dp={config.dp_size}" if config.dp_size > 1 else "",
                    f" over {config.nnodes} nodes" if config.nnodes > 1 else "", config.device, config.dtype,
                    config.dist_backend, args.num_tokenizers)
        processes = ServerProcesses.start(args)
        watcher = ChildWatcher(processes.group, processes.links)
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
        merged = TRACE.finish()  # the children have exited: their files are there
    if merged is not None:
        logger.info("trace of every process: %s (open it in https://ui.perfetto.dev)", merged)
    if failure is not None:
        _print_error(str(failure))
        return 1
    logger.info("stopped")
    return 0


def launch_node(args: ServerArgs) -> int:
    """Node `args.node_rank` > 0 of a multi-node run: this node's ranks, until node 0 ends the run
    (they exit cleanly: 0), or either side goes away (1). Ctrl-C / SIGTERM stop it like the server."""
    config = args.scheduler
    host, port = parse_tcp_addr(config.dist_init_addr)
    signal.signal(signal.SIGINT, _on_stop_signal)
    signal.signal(signal.SIGTERM, _on_stop_signal)
    group = ChildGroup(config.trace_dir)  # (node 0 merges: copy this node's trace files next to its own)
    link: socket.socket | None = None
    watcher: ChildWatcher | None = None
    failure: LaunchError | None = None
    try:
        ranks = spawn_ranks(group, config, node_addresses(group, config), args.node_rank)
        link = connect_to_node0(host, port + NODE_PORT_OFFSET, args.node_rank, node_run_id(config),
                                args.start_timeout_s)
        group.wait_ready(args.start_timeout_s, fix="raise --start-timeout")
        logger.info("node %d of %d: %d rank(s) serving with node 0 at %s:%d", args.node_rank, config.nnodes,
                    len(ranks), host, port)
        watcher = ChildWatcher(group, {f"node 0 ({host}:{port})": link})
        watcher.start()
        watcher.join()  # until a rank exits, or node 0 ends the run or goes away
        failure = watcher.failure
        # node 0 ended the run (it said so, or its shutdown already made a rank leave with code 0):
        # the shutdown reaches all our ranks, and we give them time to exit by themselves
        if watcher.ended_by is not None or (isinstance(failure, ChildDied) and failure.exitcode == 0):
            failure = None
            deadline = time.monotonic() + NODE_STOP_S
            for process in ranks:
                process.join(max(0.0, deadline - time.monotonic()))
            logger.info("node 0 ended the run")
    except LaunchError as error:
        failure = error
    except (KeyboardInterrupt, StopRequested):
        pass
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if watcher is not None:
            watcher.stop()
        if failure is not None and not _is_real_failure(failure):
            failure = None
        group.stop()
        if link is not None:
            link.close()
    if failure is not None:
        _print_error(str(failure))
        return 1
    return 0


def _print_error(message: str) -> None:
    import sys

    print(f"minisgl: error: {message}", file=sys.stderr, flush=True)
