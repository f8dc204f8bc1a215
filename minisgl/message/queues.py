"""ZMQ sockets, wrapped once (chapters 02 and 06): queues that encode and decode messages themselves;
no other file makes a ZMQ socket. The one reader of a queue binds its address and every writer
connects (PULL and SUB read; PUSH and PUB write): `PushQueue` / `PullQueue` (`AsyncPullQueue` in the
API's event loop) carry requests to rank 0 and outputs to the detokenizer, `PubQueue` / `SubQueue`
rank 0's broadcast, whose bytes rank 0 forwards as it pulled them (`put_raw`). Sends never block (the
senders bound their own backlog); closing drops unsent messages unless the caller waits
(`close(linger_ms=...)`), so a dead peer never blocks an exit.
"""

from __future__ import annotations

from typing import Any

import zmq
import zmq.asyncio

from .messages import decode_message, encode_message


def send_what_is_left() -> None:
    """Close this process's sockets and wait, at most each one's linger, until what they hold has left:
    a child forked from the fork server ends with `os._exit`, which would drop, say, a last ShutdownRequest."""
    zmq.Context.instance().destroy()  # (linger: each socket's own; ours are 0 unless closed with more)


class _Queue:
    """One socket of `kind` at `addr`, from the process-wide ZMQ context."""

    def __init__(self, kind: int, addr: str, bind: bool) -> None:
        self.socket = zmq.Context.instance().socket(kind)
        self.socket.setsockopt(zmq.LINGER, 0)
        if bind:
            self.socket.bind(addr)
        else:
            # a writer may connect before its reader has bound (processes forked from the fork server
            # start within milliseconds of each other): retry every 10 ms, not ZMQ's default 100 ms
            self.socket.setsockopt(zmq.RECONNECT_IVL, 10)
            self.socket.connect(addr)

    def close(self, linger_ms: int = 0) -> None:
        """Close the socket; `linger_ms` > 0 waits that long for unsent messages to leave."""
        self.socket.close(linger=linger_ms)


class PushQueue(_Queue):
    """Writes messages to the reader bound at `addr`."""

    def __init__(self, addr: str) -> None:
        super().__init__(zmq.PUSH, addr, bind=False)
        self.socket.setsockopt(zmq.SNDHWM, 0)  # never block the sender (no high-water mark)

    def put(self, message: Any) -> None:
        self.socket.send(encode_message(message))


class PullQueue(_Queue):
    """Reads the messages every writer pushes to `addr` (binds it)."""

    def __init__(self, addr: str) -> None:
        super().__init__(zmq.PULL, addr, bind=True)

    def get(self) -> Any:
        """The next message; waits as long as it takes."""
        return decode_message(self.socket.recv())

    def get_all(self, wait_ms: int) -> list[Any]:
        """Every message that arrived, waiting up to `wait_ms` for the first (none: [])."""
        return [decode_message(payload) for payload in self.get_all_raw(wait_ms)]

    def get_all_raw(self, wait_ms: int) -> list[bytes]:
        """Like `get_all`, but the encoded bytes, for a reader that forwards them (rank 0)."""
        payloads = []
        while self.socket.poll(0 if payloads else wait_ms):  # wait for the first only
            payloads.append(self.socket.recv())
        return payloads


class AsyncPullQueue:
    """`PullQueue` for an asyncio reader (the API): `await get()` waits without blocking the loop."""

    def __init__(self, addr: str) -> None:
        self._context = zmq.asyncio.Context()  # its own: an asyncio socket must come from an asyncio context
        self.socket = self._context.socket(zmq.PULL)
        self.socket.bind(addr)

    async def get(self) -> Any:
        return decode_message(await self.socket.recv())

    def close(self) -> None:
        self._context.destroy(linger=0)


class PubQueue(_Queue):
    """Rank 0's end of the broadcast: every payload reaches every subscriber (binds `addr`). An XPUB
    socket, which reports each subscription: PUB drops what it sends before a subscriber has joined,
    so rank 0 first waits until all of them have (`wait_for_subscribers`)."""

    def __init__(self, addr: str) -> None:
        super().__init__(zmq.XPUB, addr, bind=True)
        self.socket.setsockopt(zmq.XPUB_VERBOSE, 1)  # report every subscriber, not just the first

    def wait_for_subscribers(self, count: int, timeout_ms: int) -> None:
        """Return once `count` subscribers joined; raise `TimeoutError` after `timeout_ms`."""
        self.socket.setsockopt(zmq.RCVTIMEO, timeout_ms)
        for joined in range(count):
            try:
                self.socket.recv()  # one subscription frame per SUB socket
            except zmq.Again:
                raise TimeoutError(f"{joined} of {count} ranks subscribed to rank 0's broadcast "
                                   f"within {timeout_ms / 1000:g} s") from None

    def put_raw(self, payload: bytes) -> None:
        self.socket.send(payload)


class SubQueue(_Queue):
    """A rank's end of the broadcast (connects to rank 0's `addr`); a read that waits longer than
    `timeout_ms` raises `TimeoutError` instead of hanging."""

    def __init__(self, addr: str, timeout_ms: int) -> None:
        super().__init__(zmq.SUB, addr, bind=False)
        self.socket.setsockopt(zmq.SUBSCRIBE, b"")
        self.socket.setsockopt(zmq.RCVTIMEO, timeout_ms)
        self._timeout_ms = timeout_ms

    def get_raw(self) -> bytes:
        try:
            return self.socket.recv()
        except zmq.Again:
            raise TimeoutError(f"rank 0 published nothing for {self._timeout_ms / 1000:g} s") from None
