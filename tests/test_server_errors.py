"""Bad requests get OpenAI-shaped errors with the right status while a good request in flight
finishes untouched; hostile input (NaN, a browser's text/plain post, lone surrogates, integers
beyond 64 bits, unsupported parameters, a nested-JSON bomb) is a 4xx that holds no slot; a client
that disconnects has its request aborted, streaming or not; a full server answers 503; the API
key guards the schema pages too. A fuzz test throws random bodies at it."""

from __future__ import annotations

import json
import socket
import threading
import time
from contextlib import ExitStack

import httpx
import openai
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

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


def post(server: RunningServer, path: str, body: object, headers: dict[str, str] = AUTH,
         content_type: str = "application/json") -> httpx.Response:
    content = body if isinstance(body, (str, bytes)) else json.dumps(body)
    return httpx.post(f"{server.base_url}{path}", content=content, timeout=60,
                      headers={"Content-Type": content_type, **headers})


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
    # How long the good request outlives the bad ones depends on the CPU (480 tokens of the tiny
    # model can finish within the bad requests on a fast one), so overlap is asserted for the first.
    first_bad_done_at = time.monotonic()
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

    good.join(120)
    assert not good.is_alive()
    assert result["last_chunk_at"] > first_bad_done_at, "the good request should have been running meanwhile"
    assert result["status"] == 200
    text_chunks = [c for c in result["chunks"] if c["choices"]]
    assert text_chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert result["chunks"][-1]["usage"]["completion_tokens"] == 480


def test_health_needs_no_key_and_good_requests_work(server):
    assert httpx.get(f"{server.base_url}/health").status_code == 200
    client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key=API_KEY, max_retries=0)
    answer = client.completions.create(model="qwen2", prompt="hi", max_tokens=3, temperature=0)
    assert answer.usage.completion_tokens == 3


def wait_for(server: RunningServer, predicate, timeout_s: float = 60.0) -> dict:
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


BIG = 2**64  # msgpack carries no integer this large
# name: (path, raw body, content type, status, param). Each was a 500, a coerced 200, a dead server
# or a leaked slot before.
HOSTILE = {
    "nan-temperature": ("/v1/completions", '{"prompt": "hi", "max_tokens": 2, "temperature": NaN}', None, 400,
                        "temperature"),
    "infinite-top-p": ("/v1/completions", '{"prompt": "hi", "top_p": Infinity}', None, 400, "top_p"),
    "text-plain": ("/v1/completions", '{"prompt": "hi", "max_tokens": 2}', "text/plain", 415, None),
    "form": ("/v1/chat/completions", '{"messages": []}', "application/x-www-form-urlencoded", 415, None),
    "lone-surrogate": ("/v1/completions", '{"prompt": "hi \\ud800", "max_tokens": 2}', None, 400, None),
    "lone-surrogate-chat": ("/v1/chat/completions", '{"messages": [{"role": "user", "content": "\\udfff"}]}', None,
                            400, None),
    "huge-prompt-id": ("/v1/completions", f'{{"prompt": [1, {BIG}]}}', None, 400, "prompt.1"),
    "huge-top-k": ("/v1/completions", f'{{"prompt": "hi", "top_k": {BIG}}}', None, 400, "top_k"),
    "huge-seed": ("/v1/completions", f'{{"prompt": "hi", "seed": {BIG}}}', None, 400, "seed"),
    "huge-stop-id": ("/generate", f'{{"text": "hi", "sampling_params": {{"stop_token_ids": [{BIG}]}}}}', None, 400,
                     "sampling_params.stop_token_ids.0"),
    "max-tokens-string": ("/v1/completions", '{"prompt": "hi", "max_tokens": "5"}', None, 400, "max_tokens"),
    "max-tokens-bool": ("/v1/completions", '{"prompt": "hi", "max_tokens": true}', None, 400, "max_tokens"),
    "penalty-banana": ("/v1/completions", '{"prompt": "hi", "frequency_penalty": "banana"}', None, 400,
                       "frequency_penalty"),
    "penalty-out-of-range": ("/v1/completions", '{"prompt": "hi", "presence_penalty": 3}', None, 400,
                             "presence_penalty"),
    "logit-bias-outside-vocab": ("/v1/completions", '{"prompt": "hi", "logit_bias": {"5000": 1}}', None, 400, None),
    "tools": ("/v1/chat/completions", '{"messages": [{"role": "user", "content": "hi"}], "tools": []}', None, 400,
              "tools"),
    "response-format": ("/v1/chat/completions", '{"messages": [{"role": "user", "content": "hi"}], '
                        '"response_format": {"type": "json_object"}}', None, 400, "response_format"),
    "best-of": ("/v1/completions", '{"prompt": "hi", "best_of": 2}', None, 400, "best_of"),
    "top-logprobs": ("/v1/chat/completions", '{"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 2}',
                     None, 400, "top_logprobs"),
    "suffix": ("/v1/completions", '{"prompt": "hi", "suffix": "!"}', None, 400, "suffix"),
    "nested-json": ("/v1/completions", "[" * 100_000, None, 400, None),
    "not-an-object": ("/generate", "[]", None, 400, None),
}


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_input_is_a_4xx_that_holds_no_slot(server, name):
    """Sent more often than there are slots: a request that leaked its slot would leave a 503 behind."""
    path, body, content_type, status, param = HOSTILE[name]
    for _ in range(MAX_PENDING + 1):
        message = assert_openai_error(post(server, path, body, content_type=content_type or "application/json"),
                                      status, param)
        if param is not None:
            assert param.split(".")[0] in message  # the message names the parameter too
    health = wait_for(server, lambda h: h["in_flight"] == 0)
    assert health["status"] == "ok" and health["in_flight"] == 0
    assert post(server, "/v1/completions", {"prompt": "hi", "max_tokens": 2}).status_code == 200


def openai_client(server: RunningServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key=API_KEY, max_retries=0, timeout=60)


def test_tiny_temperature_through_the_official_client_is_greedy(server):
    client = openai_client(server)

    def complete(temperature: float) -> str:
        return client.completions.create(model="qwen2", prompt="The cache", max_tokens=8, temperature=temperature,
                                         extra_body={"ignore_eos": True}).choices[0].text

    assert complete(1e-45) == complete(0.0)
    assert httpx.get(f"{server.base_url}/health").json()["status"] == "ok"


def test_logit_bias_and_penalties_reach_the_sampler(server):
    client = openai_client(server)
    kwargs = dict(model="qwen2", prompt="The cache", max_tokens=6, temperature=0, extra_body={"ignore_eos": True})
    forced = client.completions.create(logit_bias={"65": 100}, **kwargs)  # the OpenAI form: string keys
    assert forced.choices[0].text != client.completions.create(**kwargs).choices[0].text
    body = {"input_ids": [5, 6, 7], "sampling_params": {"temperature": 0, "max_new_tokens": 100, "ignore_eos": True,
                                                         "logit_bias": {"65": 100}}}
    assert post(server, "/generate", body).json()["output_ids"] == [65] * 100
    body["sampling_params"]["frequency_penalty"] = 2.0
    penalized = post(server, "/generate", body).json()["output_ids"]
    # each use of 65 costs 2: it leads for a while, then loses its +100 lead to the model's own choices
    assert penalized[:10] == [65] * 10 and penalized.count(65) < 100


def test_schema_pages_are_off_behind_a_key(server):
    for path in ("/docs", "/redoc", "/openapi.json"):
        assert_openai_error(httpx.get(f"{server.base_url}{path}", headers=AUTH), 404)


def test_abandoned_non_streaming_request_frees_its_kv_while_tokens_flow(server):
    """Before: only after 1 s without output, i.e. never until the end, where the request finished
    ("length") instead of being aborted. An abort confirmed by rank 0 is the event waited for."""
    aborted_before = wait_for(server, lambda h: h["in_flight"] == 0)["aborted"]
    body = json.dumps({"prompt": "Go on", "max_tokens": 480, "temperature": 0, "ignore_eos": True}).encode()
    request = (f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {API_KEY}\r\n"
               f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as client:
        client.sendall(request)
        assert wait_for(server, lambda h: h["in_flight"] == 1)["in_flight"] == 1
        time.sleep(0.3)  # decoding now
    health = wait_for(server, lambda h: h["aborted"] > aborted_before)
    assert health["aborted"] == aborted_before + 1 and health["in_flight"] == 0


# ---- fuzz: random bodies over the request schema ---------------------------------------------
JUNK = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)
TOKEN_IDS = st.lists(st.integers(-2, 1100), max_size=6)
MESSAGES = st.lists(st.fixed_dictionaries({"role": st.sampled_from(["system", "user", "assistant", "wizard"]),
                                           "content": st.text(max_size=12) | JUNK}), max_size=3)
# each parameter: mostly plausible values (so requests get through to the engine), sometimes junk
COMMON = {
    "model": st.sampled_from(["qwen2", "gpt-4"]),
    "max_tokens": st.integers(-1, 4) | st.sampled_from([2**31, 2**64, "3", True, 2.0]),
    "temperature": st.floats(-0.5, 3) | st.sampled_from([1e-45, 0.0]),
    "top_p": st.floats(-0.1, 1.1),
    "top_k": st.integers(-3, 2000),
    "seed": st.integers(-1, 2**64),
    "stop": st.text(max_size=3) | st.lists(st.text(max_size=3), max_size=3),
    "frequency_penalty": st.floats(-3, 3),
    "presence_penalty": st.floats(-3, 3),
    "logit_bias": st.dictionaries(st.integers(-1, 1100).map(str), st.floats(-150, 150), max_size=3),
    "stream": st.booleans(),
    "stream_options": st.fixed_dictionaries({"include_usage": st.booleans()}),
    "n": st.integers(0, 2),
    "logprobs": st.booleans(),
    "best_of": st.integers(1, 2),
}
BODIES = {
    "/v1/completions": {**COMMON, "prompt": st.text(max_size=20) | TOKEN_IDS, "echo": st.booleans()},
    "/v1/chat/completions": {**COMMON, "messages": MESSAGES, "max_completion_tokens": st.integers(-1, 4)},
    "/generate": {"text": st.text(max_size=20), "input_ids": TOKEN_IDS, "stream": st.booleans(),
                  "sampling_params": st.fixed_dictionaries({}, optional={
                      "max_new_tokens": st.integers(-1, 4), "temperature": st.floats(0, 2),
                      "stop_token_ids": TOKEN_IDS, "logit_bias": COMMON["logit_bias"], "top_k": st.integers(-2, 50)})},
}


@st.composite
def requests(draw) -> tuple[str, dict]:
    path = draw(st.sampled_from(sorted(BODIES)))
    fields = {name: strategy | JUNK if name not in ("stream", "max_tokens") else strategy
              for name, strategy in BODIES[path].items()}
    return path, draw(st.fixed_dictionaries({}, optional=fields))


def check_answer(response: httpx.Response, body: dict) -> None:
    """A well-formed OpenAI (or native) answer, or an OpenAI error with a 4xx status."""
    if response.status_code != 200:
        assert response.status_code in (400, 404, 415), response.text
        assert_openai_error(response, response.status_code)
        return
    if body.get("stream") is True:
        events = [line[len("data: "):] for line in response.text.splitlines() if line.startswith("data: ")]
        assert events, response.text
        chunks = [json.loads(e) for e in events if e != "[DONE]"]
        assert events[-1] == "[DONE]" or "error" in chunks[-1], response.text
        assert all("error" in c or "choices" in c or "output_ids" in c or "usage" in c for c in chunks)
        return
    answer = response.json()
    if "choices" in answer:
        assert answer["choices"][0]["finish_reason"] in ("stop", "length") and answer["usage"]["total_tokens"] > 0
    else:
        assert answer["finish_reason"] in ("stop", "length") and isinstance(answer["output_ids"], list)


@pytest.mark.timeout(600)
@settings(max_examples=80, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(request=requests())
def test_fuzzed_requests_get_an_answer_or_an_error_and_free_their_slot(server, request):
    path, body = request
    try:
        payload = json.dumps(body, allow_nan=True)
    except ValueError:
        return  # a body json cannot even write
    response = post(server, path, payload)
    event(f"{path} {response.status_code}")
    check_answer(response, body)
    health = wait_for(server, lambda h: h["in_flight"] == 0)
    assert health["status"] == "ok" and health["in_flight"] == 0, health
