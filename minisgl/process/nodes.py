"""The links between the launchers of a multi-node run (chapter 12): each other node's launcher
keeps one TCP connection to node 0's, so either side learns at once when the other goes away.

Node 0's launcher listens on the dist-init host, `NODE_PORT_OFFSET` ports above the dist-init port.
Node r connects and says who it is in one line, `minisgl-node <run id> r`, where the run id is a
digest of the launch settings every node shares (`run_id`); node 0 answers `ok`, or `refused
<why>` and closes. Until a connection has said that, it does not count: anything else that
connects (a port scanner, a health probe, a node of another run) is closed after its first line, or
after `HELLO_TIMEOUT_S` of silence, and start-up goes on waiting for the real nodes.

After that, one thing may be said: node 0 sends `stop` when it ends the run on purpose (its ranks'
shutdown reaches every node's ranks). A link that becomes readable without it has closed: its
launcher exited, even by kill -9 (the kernel closes a dead process's sockets), and TCP keepalive
probes notice a machine that vanished within about 15 s. `ChildWatcher` waits on the links together
with the child processes.
"""

from __future__ import annotations

import hashlib
import logging
import selectors
import socket
import time
from dataclasses import dataclass, field

from minisgl.distributed.rendezvous import parse_tcp_addr

from .errors import LaunchError

logger = logging.getLogger("minisgl")

NODE_PORT_OFFSET = 2  # dist-init port: the torch store; + 1: rank 0's broadcast; + 2: the node links
CONNECT_RETRY_S = 0.5
HELLO_TIMEOUT_S = 10.0  # a connection must say who it is within this, or it is closed
HELLO = "minisgl-node"
MAX_LINE = 256  # bytes of a hello or an answer; anything longer is not one of ours
STOP = b"stop\n"


def check_dist_init_addr(addr: str) -> tuple[str, int]:
    """`--dist-init-addr` as the user typed it -> (host, port), or a one-line ValueError quoting it:
    node 0 also listens on the next `NODE_PORT_OFFSET` ports, so the port leaves room for them."""
    host, port = parse_tcp_addr(addr)
    if port > 65535 - NODE_PORT_OFFSET:
        raise ValueError(f"the port of {addr!r} leaves no room for the next {NODE_PORT_OFFSET} ports, which node 0 "
                         f"also listens on; use a port in 1..{65535 - NODE_PORT_OFFSET}")
    return host, port


def run_id(*settings: object) -> str:
    """A digest of the launch settings every node of a run must share (the launcher picks them):
    a node started with others is refused instead of joining a group it does not fit."""
    return hashlib.sha256(repr(settings).encode()).hexdigest()[:16]


def listen_for_nodes(host: str, port: int) -> socket.socket:
    """Node 0: the listening socket, bound before anything starts so that a taken port fails at once."""
    try:
        return socket.create_server((host, port))
    except OSError as error:
        raise LaunchError(f"node 0 cannot listen for the other nodes on {host}:{port} ({error.strerror}); "
                          "pass another --dist-init-addr port") from None


def accept_nodes(listener: socket.socket, nnodes: int, run: str, timeout_s: float) -> dict[str, socket.socket]:
    """Node 0: wait until nodes 1 .. nnodes - 1 joined with this `run` id; returns {"node r": its link}."""
    door = _Door(listener, nnodes, run)
    try:
        door.serve(until=time.monotonic() + timeout_s, timeout_s=timeout_s)
    except BaseException:
        for link in door.links.values():
            link.close()
        raise
    finally:
        door.close()
    listener.close()
    return door.links


@dataclass
class _Caller:
    """A connection that has not said who it is yet."""

    peer: str
    deadline: float
    received: bytes = field(default=b"")


class _Door:
    """Node 0's link port: every caller is heard at once (one selector), so a silent one holds up
    nobody; a caller becomes a link only by a hello `_judge` accepts."""

    def __init__(self, listener: socket.socket, nnodes: int, run: str) -> None:
        self.listener = listener
        self.nnodes = nnodes
        self.run = run
        self.callers: dict[socket.socket, _Caller] = {}
        self.links: dict[str, socket.socket] = {}
        listener.setblocking(False)
        self.selector = selectors.DefaultSelector()
        self.selector.register(listener, selectors.EVENT_READ)

    def serve(self, until: float, timeout_s: float) -> None:
        """Hear callers until every other node has joined; a `LaunchError` at `until`."""
        while len(self.links) < self.nnodes - 1:
            now = time.monotonic()
            if now >= until:
                missing = [str(r) for r in range(1, self.nnodes) if f"node {r}" not in self.links]
                raise LaunchError(f"node(s) {', '.join(missing)} did not join within {timeout_s:.0f} s: start them "
                                  "with the same --nnodes, --tp-size, --dist-init-addr and model, and their "
                                  "--node-rank")
            wake = min([until, *(caller.deadline for caller in self.callers.values())])
            for key, _ in self.selector.select(max(0.0, wake - now)):
                if key.fileobj is self.listener:
                    self._let_in()
                else:
                    assert isinstance(key.fileobj, socket.socket)
                    self._hear(key.fileobj)
            # only after reading what arrived: a busy machine may run this loop late, not the callers
            now = time.monotonic()
            for conn in [c for c, caller in self.callers.items() if caller.deadline <= now]:
                self._drop(conn, f"said nothing within {HELLO_TIMEOUT_S:g} s")

    def close(self) -> None:
        for conn in self.callers:  # strangers still silent when the nodes had joined
            conn.close()
        self.selector.close()

    def _let_in(self) -> None:
        try:
            conn, address = self.listener.accept()
        except BlockingIOError:  # the caller gave up already
            return
        conn.setblocking(False)
        # its time to speak starts now (not when the select began: that may be seconds ago)
        self.callers[conn] = _Caller(f"{address[0]}:{address[1]}", time.monotonic() + HELLO_TIMEOUT_S)
        self.selector.register(conn, selectors.EVENT_READ)

    def _hear(self, conn: socket.socket) -> None:
        """Read what `conn` sent; once a whole line is there, let it join or drop it."""
        caller = self.callers[conn]
        try:
            data = conn.recv(MAX_LINE)
        except OSError:
            data = b""
        if not data:
            self._drop(conn, "closed before saying who it is")
            return
        caller.received += data
        if b"\n" not in caller.received:
            if len(caller.received) > MAX_LINE:
                self._drop(conn, "is not a minisgl node")
            return
        hello = caller.received.split(b"\n", 1)[0].decode(errors="replace").split()
        if hello[:1] != [HELLO]:
            self._drop(conn, "is not a minisgl node")
            return
        refusal = _judge(hello, self.nnodes, self.run, self.links)
        if refusal is not None:
            self._drop(conn, f"was refused: {refusal}", answer=f"refused {refusal}")
            return
        del self.callers[conn]
        self.selector.unregister(conn)
        conn.setblocking(True)
        conn.sendall(b"ok\n")
        self.links[f"node {hello[2]}"] = _keepalive(conn)

    def _drop(self, conn: socket.socket, why: str, answer: str | None = None) -> None:
        logger.warning("node link port: %s %s; ignored", self.callers.pop(conn).peer, why)
        self.selector.unregister(conn)
        if answer is not None:
            try:
                conn.sendall(f"{answer}\n".encode())
            except OSError:
                pass  # it left already
        conn.close()


def _judge(hello: list[str], nnodes: int, run: str, links: dict[str, socket.socket]) -> str | None:
    """Why the hello `minisgl-node <run id> <rank>` cannot join, or None when it can."""
    if len(hello) != 3 or not hello[2].isdigit():
        return "its hello is not `minisgl-node <run id> <node rank>`"
    if hello[1] != run:
        return "its launch settings differ from node 0's (--nnodes, --tp-size, --pp-size, --dist-init-addr, model)"
    if not 0 < int(hello[2]) < nnodes:
        return f"--node-rank {hello[2]} is not in 1..{nnodes - 1}"
    if f"node {hello[2]}" in links:
        return f"node {hello[2]} has joined already"
    return None


def connect_to_node0(host: str, port: int, node_rank: int, run: str, timeout_s: float) -> socket.socket:
    """Node r: connect to node 0's launcher (it may start later: retry until `timeout_s`), say who we
    are, and wait for its answer."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            conn = socket.create_connection((host, port), timeout=5.0)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise LaunchError(f"node 0 did not answer on {host}:{port} within {timeout_s:.0f} s: start it "
                                  "with the same --nnodes and --dist-init-addr") from None
            time.sleep(CONNECT_RETRY_S)
    try:
        conn.sendall(f"{HELLO} {run} {node_rank}\n".encode())
        conn.settimeout(max(1.0, deadline - time.monotonic()))
        answer = _read_line(conn)
    except OSError:
        answer = ""
    if answer != "ok":
        conn.close()
        why = answer.removeprefix("refused ") if answer.startswith("refused ") else "it closed the link"
        raise LaunchError(f"node 0 at {host}:{port} did not take node {node_rank}: {why}")
    return _keepalive(conn)


def _read_line(conn: socket.socket) -> str:
    """One line, read a byte at a time: nothing after it (a later `stop`) is taken from the socket."""
    line = b""
    while not line.endswith(b"\n") and len(line) < MAX_LINE:
        byte = conn.recv(1)
        if not byte:
            break
        line += byte
    return line.decode(errors="replace").strip()


def say_stop(links: dict[str, socket.socket]) -> None:
    """Node 0: tell every other node the run ends on purpose (before shutting the ranks down)."""
    for link in links.values():
        try:
            link.sendall(STOP)
        except OSError:
            pass  # that node is gone already; nothing to tell


def read_link(link: socket.socket) -> bytes:
    """What a readable link says: `STOP`, or b"" when it closed."""
    try:
        return link.recv(len(STOP))
    except OSError:
        return b""


def _keepalive(conn: socket.socket) -> socket.socket:
    """Blocking, and probed by the kernel after 5 s of silence, every 2 s, 5 times."""
    conn.settimeout(None)
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for option, value in (("TCP_KEEPIDLE", 5), ("TCP_KEEPINTVL", 2), ("TCP_KEEPCNT", 5)):
        if hasattr(socket, option):  # Linux names; macOS has only some of them
            conn.setsockopt(socket.IPPROTO_TCP, getattr(socket, option), value)
    return conn
