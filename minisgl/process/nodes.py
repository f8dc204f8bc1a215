"""The links between the launchers of a multi-node run (chapter 12): each other node's launcher
keeps one TCP connection to node 0's, so either side learns at once when the other goes away.

Node 0's launcher listens on the dist-init host, `NODE_PORT_OFFSET` ports above the dist-init port;
node r connects and sends one line, `node r`. After that, one thing may be said: node 0 sends
`stop` when it ends the run on purpose (its ranks' shutdown reaches every node's ranks). A link
that becomes readable without it has closed: its launcher exited, even by kill -9 (the kernel closes
a dead process's sockets), and TCP keepalive probes notice a machine that vanished within about
15 s. `ChildWatcher` waits on the links together with the child processes.
"""

from __future__ import annotations

import socket
import time

from .errors import LaunchError

NODE_PORT_OFFSET = 2  # dist-init port: the torch store; + 1: rank 0's broadcast; + 2: the node links
CONNECT_RETRY_S = 0.5
STOP = b"stop\n"


def listen_for_nodes(host: str, port: int) -> socket.socket:
    """Node 0: the listening socket, bound before anything starts so that a taken port fails at once."""
    try:
        return socket.create_server((host, port))
    except OSError as error:
        raise LaunchError(f"node 0 cannot listen for the other nodes on {host}:{port} ({error.strerror}); "
                          "pass another --dist-init-addr port") from None


def accept_nodes(listener: socket.socket, nnodes: int, timeout_s: float) -> dict[str, socket.socket]:
    """Node 0: wait until nodes 1 .. nnodes - 1 connected; returns {"node r": its link}."""
    links: dict[str, socket.socket] = {}
    deadline = time.monotonic() + timeout_s
    while len(links) < nnodes - 1:
        listener.settimeout(max(0.0, deadline - time.monotonic()))
        try:
            conn, _ = listener.accept()
            conn.settimeout(5.0)
            hello = conn.makefile().readline().split()
        except (TimeoutError, OSError):
            missing = [str(r) for r in range(1, nnodes) if f"node {r}" not in links]
            raise LaunchError(f"node(s) {', '.join(missing)} did not join within {timeout_s:.0f} s: start them with "
                              "the same --nnodes and --dist-init-addr and their --node-rank") from None
        if len(hello) != 2 or hello[0] != "node" or not hello[1].isdigit() or not 0 < int(hello[1]) < nnodes:
            conn.close()  # not one of ours
            continue
        links[f"node {hello[1]}"] = _keepalive(conn)
    listener.close()
    return links


def connect_to_node0(host: str, port: int, node_rank: int, timeout_s: float) -> socket.socket:
    """Node r: connect to node 0's launcher (it may start later: retry until `timeout_s`), say who we are."""
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
    conn.sendall(f"node {node_rank}\n".encode())
    return _keepalive(conn)


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
