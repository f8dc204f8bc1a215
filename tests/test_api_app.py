"""The HTTP app in this process, on a loopback port, with no engine behind it: an unexpected error
is a JSON 500 that keeps the keep-alive connection and logs one line; the API key is compared in
constant time, read from MINISGL_API_KEY, and turns the schema pages off."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
import uvicorn

from minisgl.message import IpcAddresses
from minisgl.server.api_server import ApiState, create_app
from minisgl.server.args import API_KEY_ENV, parse_args
from minisgl.server.frontend import Frontend

pytestmark = pytest.mark.timeout(60)


class AppServer:
    """`create_app` served by uvicorn on a thread; its frontend's sockets lead nowhere."""

    def __init__(self, model_dir: Path, tmp_path: Path, *flags: str) -> None:
        args = parse_args(["--model", str(model_dir), *flags])
        processes = SimpleNamespace(addrs=IpcAddresses.in_dir(str(tmp_path), num_tokenizers=1))
        self.sock = socket.create_server(("127.0.0.1", 0))  # the kernel picks a free port
        self.port = self.sock.getsockname()[1]
        config = uvicorn.Config(create_app(ApiState(args, processes)), log_config=None, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "the app did not start"
            time.sleep(0.05)

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()


@pytest.fixture
def app_server(tiny_model_dir, tmp_path):
    servers: list[AppServer] = []

    def start(*flags: str) -> AppServer:
        servers.append(AppServer(tiny_model_dir("qwen2"), tmp_path, *flags))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def _exchange(sock: socket.socket, body: bytes) -> tuple[int, dict]:
    """One HTTP/1.1 request on an open connection; the status and the JSON answer."""
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, "the server closed the connection"
        data += chunk
    head, rest = data.split(b"\r\n\r\n", 1)
    lines = head.decode().split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:])
    assert headers.get("connection") != "close", "the server is closing this connection"
    while len(rest) < int(headers["content-length"]):
        chunk = sock.recv(65536)
        assert chunk, "the server closed the connection"
        rest += chunk
    return int(lines[0].split()[1]), json.loads(rest)


def test_an_unexpected_error_is_a_json_500_on_a_connection_that_stays_open(app_server, monkeypatch, caplog):
    def broken_submit(self, *args, **kwargs):
        raise RuntimeError("something nobody expected\nsecond line")

    monkeypatch.setattr(Frontend, "submit", broken_submit)
    server = app_server()
    caplog.set_level(logging.INFO)
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        for _ in range(3):  # the same connection each time: keep-alive survives the error
            status, answer = _exchange(sock, b'{"prompt": "hi"}')
            assert status == 500
            assert answer["error"]["type"] == "server_error"
            assert "RuntimeError: something nobody expected second line" in answer["error"]["message"]
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 3 and all("\n" not in r.getMessage() and r.exc_info is None for r in errors)


def test_the_api_key_comes_from_the_environment_and_hides_the_schema(app_server, monkeypatch):
    monkeypatch.setenv(API_KEY_ENV, "sk-from-env")
    server = app_server()
    base = f"http://127.0.0.1:{server.port}"
    assert httpx.get(f"{base}/v1/models").status_code == 401
    assert httpx.get(f"{base}/v1/models", headers={"Authorization": "Bearer sk-from-env"}).status_code == 200
    not_ascii = {"Authorization": "Bearer sk-from-\xe9nv".encode("latin-1")}
    assert httpx.get(f"{base}/v1/models", headers=not_ascii).status_code == 401  # not a 500 from the compare
    for path in ("/docs", "/redoc", "/openapi.json"):
        assert httpx.get(f"{base}{path}", headers={"Authorization": "Bearer sk-from-env"}).status_code == 404


def test_without_a_key_the_schema_pages_are_served(app_server, monkeypatch):
    monkeypatch.delenv(API_KEY_ENV, raising=False)
    server = app_server()
    assert httpx.get(f"http://127.0.0.1:{server.port}/openapi.json").status_code == 200
