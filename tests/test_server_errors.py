"""Bad requests get OpenAI-shaped errors with the right status while a good request in flight
finishes untouched; a client that disconnects has its request aborted; a full server answers 503."""

from __future__ import annotations

import json
import threading
import time
from contextlib import ExitStack

import httpx
import openai
import pytest

from minisgl.testing.server import RunningServer

pytestmark = pytest.mark.timeout(300)

API_KEY = "sk-test"
MAX_PENDING = 4
AUTH = {"Authorization": f"Bearer {API_KEY}"}


@pytest.fixture(scope="module")
def server(tiny_model_dir):
    args = ["--model", str(tiny_model_dir("qwen2")), "--device", "cpu", "--dtype", "float32", "--api-key", API_KEY,
            "--max-pending-requests", str(MAX_PENDING), "--max-running-requests", "1", "--log-level", "warning"]
    with RunningServer(args) as running:
        yield running


def post(server: RunningServer, path: str, body: object, headers: dict[str, str] = AUTH) -> httpx.Response:
    content = body if isinstance(body, (str, bytes)) else json.dumps(body)
    return httpx.post(f"{server.base_url}{path}", content=content, timeout=60,
                      headers={"Content-Type": "application/json", **headers})


def assert_openai_error(response: httpx.Response, status: int, param: str | None = None) -> str:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"]
    if param is not None:
        assert error["param"] == param
    return error["message"]


def long_request(server: RunningServer, result: dict, started: threading.Event) -> None:
    """A streaming request that runs while the bad ones arrive."""
    body = {"model": "qwen2", "prompt": "A long answer", "max_tokens": 480, "temperature": 0,
            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    with httpx.stream("POST", f"{server.base_url}/v1/completions", json=body, headers=AUTH, timeout=120) as response:
        result["status"] = response.status_code
        for line in response.iter_lines():
            if line.startswith("data: {"):
                result.setdefault("chunks", []).append(json.loads(line[len("data: "):]))
                result["last_chunk_at"] = time.monotonic()
                started.set()


def test_bad_requests_fail_alone(server):
    result: dict = {}
    started = threading.Event()
    good = threading.Thread(target=long_request, args=(server, result, started))
    good.start()
    assert started.wait(60)

    assert_openai_error(post(server, "/v1/completions", '{"prompt": "hi", "max_tokens": '), 400)
    assert_openai_error(post(server, "/v1/chat/completions", "not json at all"), 400)
    message = assert_openai_error(post(server, "/v1/completions", {"model": "gpt-4", "prompt": "hi"}), 404, "model")
    assert "qwen2" in message  # names the model this server serves
    assert_openai_error(post(server, "/v1/completions", {"prompt": "hi", "max_tokens": -3}), 400, "max_tokens")
    assert_openai_error(post(server, "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                                               "max_completion_tokens": 0}), 400,
                        "max_completion_tokens")
    assert_openai_error(post(server, "/v1/completions", {"prompt": "hi", "n": 3}), 400, "n")
    too_long = " ".join(str(n) for n in range(600))  # > the tiny model's 512-token context
    message = assert_openai_error(post(server, "/v1/completions", {"prompt": too_long}), 400)
    assert "context" in message
    streamed_too_long = post(server, "/v1/completions", {"prompt": too_long, "stream": True})
    assert_openai_error(streamed_too_long, 400)  # a stream that cannot start is a plain error, not a 200
    assert_openai_error(post(server, "/generate", {"input_ids": [1, 10**6]}), 400)
    assert_openai_error(post(server, "/v1/completions", {"prompt": "hi"}, headers={}), 401)
    assert_openai_error(post(server, "/v1/completions", {"prompt": "hi"}, headers={"Authorization": "Bearer no"}), 401)
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="wrong", max_retries=0).models.list()

    bad_ones_done_at = time.monotonic()

    good.join(120)
    assert not good.is_alive()
    assert result["last_chunk_at"] > bad_ones_done_at, "the good request should have been running meanwhile"
    assert result["status"] == 200
    text_chunks = [c for c in result["chunks"] if c["choices"]]
    assert text_chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert result["chunks"][-1]["usage"]["completion_tokens"] == 480


def test_health_needs_no_key_and_good_requests_work(server):
    assert httpx.get(f"{server.base_url}/health").status_code == 200
    client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key=API_KEY, max_retries=0)
    answer = client.completions.create(model="qwen2", prompt="hi", max_tokens=3, temperature=0)
    assert answer.usage.completion_tokens == 3


def wait_for(server: RunningServer, predicate, timeout_s: float = 20.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        health = httpx.get(f"{server.base_url}/health").json()
        if predicate(health) or time.monotonic() > deadline:
            return health
        time.sleep(0.1)


def open_stream(stack: ExitStack, server: RunningServer) -> httpx.Response:
    """Start a long streaming request and read its first event, so it is surely running."""
    body = {"prompt": "Go on", "max_tokens": 400, "temperature": 0, "ignore_eos": True, "stream": True}
    client = stack.enter_context(httpx.Client(timeout=60))
    response = stack.enter_context(client.stream("POST", f"{server.base_url}/v1/completions", json=body, headers=AUTH))
    assert response.status_code == 200
    next(response.iter_lines())
    return response


def test_client_disconnect_aborts_the_request(server):
    aborted_before = wait_for(server, lambda h: h["in_flight"] == 0)["aborted"]
    with ExitStack() as stack:
        open_stream(stack, server)
    health = wait_for(server, lambda h: h["aborted"] > aborted_before)
    assert health["aborted"] == aborted_before + 1  # rank 0 confirmed: the KV pages are free again
    assert health["in_flight"] == 0


def test_full_server_answers_503_then_recovers(server):
    wait_for(server, lambda h: h["in_flight"] == 0)
    done = threading.Event()

    def stream_until_done() -> None:
        # one request runs at a time (--max-running-requests 1): the others wait, in flight
        body = {"prompt": "Go on", "max_tokens": 480, "temperature": 0, "ignore_eos": True, "stream": True}
        with httpx.stream("POST", f"{server.base_url}/v1/completions", json=body, headers=AUTH, timeout=60) as r:
            for _ in r.iter_lines():
                if done.is_set():
                    return  # disconnect: the server aborts the request

    threads = [threading.Thread(target=stream_until_done) for _ in range(MAX_PENDING)]
    for thread in threads:
        thread.start()
    try:
        assert wait_for(server, lambda h: h["in_flight"] == MAX_PENDING)["in_flight"] == MAX_PENDING
        message = assert_openai_error(post(server, "/v1/completions", {"prompt": "one too many"}), 503)
        assert "retry" in message
    finally:
        done.set()
        for thread in threads:
            thread.join(60)
    wait_for(server, lambda h: h["in_flight"] == 0)
    assert post(server, "/v1/completions", {"prompt": "hi", "max_tokens": 2}).status_code == 200
