"""The HTTP app in this process, on a loopback port, with no engine behind it: an unexpected error
is a JSON 500 that keeps the keep-alive connection and logs one line; the API key is compared in
constant time, read from MINISGL_API_KEY, and turns the schema pages off. What a connection may
cost (limits.py): a body over --max-body-mb is a 413 before it is read, a connection without a whole
header or with a stalled body is closed after --read-timeout, a client leaving mid-body is an INFO
line; the OpenAPI schema carries the request bodies and the errors; a 405 says what is allowed."""

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
from minisgl.server.api_server import ApiState, create_app, http_config
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
        self.server = uvicorn.Server(http_config(create_app(ApiState(args, processes)), args, log_config=None))
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
    for scheme in ("bearer", "BEARER"):  # the scheme is case-insensitive, the key is not
        assert httpx.get(f"{base}/v1/models", headers={"Authorization": f"{scheme} sk-from-env"}).status_code == 200
    for wrong in ("Bearer SK-FROM-ENV", "Basic sk-from-env", "sk-from-env", "Bearer", "Bearer sk-from-env2"):
        assert httpx.get(f"{base}/v1/models", headers={"Authorization": wrong}).status_code == 401, wrong
    not_ascii = {"Authorization": "Bearer sk-from-\xe9nv".encode("latin-1")}
    assert httpx.get(f"{base}/v1/models", headers=not_ascii).status_code == 401  # not a 500 from the compare
    for path in ("/docs", "/redoc", "/openapi.json"):
        assert httpx.get(f"{base}{path}", headers={"Authorization": "Bearer sk-from-env"}).status_code == 404


def test_without_a_key_the_schema_pages_are_served(app_server, monkeypatch):
    monkeypatch.delenv(API_KEY_ENV, raising=False)
    server = app_server()
    assert httpx.get(f"http://127.0.0.1:{server.port}/openapi.json").status_code == 200


def _answer_then_close(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """Everything the server sends until it closes the connection: status, headers, body."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    return int(lines[0].split()[1]), dict(line.lower().split(": ", 1) for line in lines[1:]), body


DEADLINE_S = 20.0  # generous: a 1 s read timeout must act long before it


def test_a_body_over_the_limit_is_a_413_before_it_is_read(app_server):
    server = app_server("--max-body-mb", "0.001")  # 1,048 bytes
    with socket.create_connection(("127.0.0.1", server.port), timeout=DEADLINE_S) as sock:
        # 50 MB announced, not one byte of it sent: the answer cannot have waited for the body
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 50000000\r\n\r\n")
        status, headers, body = _answer_then_close(sock)
    assert status == 413 and headers["connection"] == "close"
    assert "--max-body-mb" in json.loads(body)["error"]["message"]
    with socket.create_connection(("127.0.0.1", server.port), timeout=DEADLINE_S) as sock:
        # chunked: no length to check, so the body is counted as it comes (2 KB of a longer one)
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n" + b"400\r\n" + b" " * 1024 + b"\r\n" +
                     b"400\r\n" + b" " * 1024 + b"\r\n")
        status, headers, body = _answer_then_close(sock)
    assert status == 413 and json.loads(body)["error"]["code"] == "request_too_large"
    small = httpx.post(f"http://127.0.0.1:{server.port}/v1/completions", json={"prompt": "hi", "n": 2})
    assert small.status_code == 400  # a body under the limit is read and judged as usual


def test_a_connection_without_a_whole_header_is_closed_after_the_read_timeout(app_server):
    server = app_server("--read-timeout", "1")
    starts = (b"", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")  # silent; half a header
    socks = [socket.create_connection(("127.0.0.1", server.port), timeout=DEADLINE_S) for _ in starts]
    try:
        for sock, start in zip(socks, starts):
            sock.sendall(start)
        began = time.monotonic()
        for sock in socks:
            assert sock.recv(65536) == b""  # closed by the server (the socket's own timeout would raise)
        assert time.monotonic() - began < DEADLINE_S
    finally:
        for sock in socks:
            sock.close()


def test_a_stalled_body_is_a_408_and_a_whole_one_is_not(app_server):
    server = app_server("--read-timeout", "1")
    with socket.create_connection(("127.0.0.1", server.port), timeout=DEADLINE_S) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 100\r\n\r\n{\"prompt\": ")
        status, headers, body = _answer_then_close(sock)
    assert status == 408 and headers["connection"] == "close"
    assert json.loads(body)["error"]["code"] == "request_timeout"
    with socket.create_connection(("127.0.0.1", server.port), timeout=DEADLINE_S) as sock:
        for _ in range(2):  # keep-alive: the header deadline starts again after each answer
            assert _exchange(sock, b'{"prompt": "hi", "n": 2}')[0] == 400


def test_a_405_names_the_allowed_methods(app_server):
    server = app_server()
    response = httpx.get(f"http://127.0.0.1:{server.port}/v1/chat/completions")
    assert response.status_code == 405 and response.headers["allow"] == "POST"
    assert response.json()["error"]["message"] == "Method Not Allowed"


def test_the_schema_describes_the_request_bodies_and_the_errors(app_server, monkeypatch):
    monkeypatch.delenv(API_KEY_ENV, raising=False)
    server = app_server()
    schema = httpx.get(f"http://127.0.0.1:{server.port}/openapi.json").json()
    for path, model in (("/v1/completions", "CompletionRequest"), ("/v1/chat/completions", "ChatCompletionRequest"),
                        ("/generate", "GenerateRequestBody")):
        operation = schema["paths"][path]["post"]
        body_schema = operation["requestBody"]["content"]["application/json"]["schema"]
        assert body_schema == {"$ref": f"#/components/schemas/{model}"}
        for status in ("400", "413", "415", "503"):
            error = operation["responses"][status]["content"]["application/json"]["schema"]
            assert error == {"$ref": "#/components/schemas/ErrorResponse"}
    components = schema["components"]["schemas"]
    assert {"messages", "max_completion_tokens", "top_p"} <= set(components["ChatCompletionRequest"]["properties"])
    assert components["ChatCompletionRequest"]["additionalProperties"] is False  # unknown fields are a 400
    assert "ChatMessage" in components and "NativeSampling" in components  # nested models resolve


def test_a_client_leaving_mid_body_is_an_info_line_not_an_error(app_server, caplog):
    server = app_server()
    caplog.set_level(logging.INFO, logger="minisgl")
    with socket.create_connection(("127.0.0.1", server.port), timeout=DEADLINE_S) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 1000\r\n\r\n{\"prompt\": ")
    deadline = time.monotonic() + DEADLINE_S
    while not any("before its body arrived" in r.getMessage() for r in caplog.records):
        assert time.monotonic() < deadline, [r.getMessage() for r in caplog.records]
        time.sleep(0.05)
    line = next(r for r in caplog.records if "before its body arrived" in r.getMessage())
    assert line.levelno == logging.INFO
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
