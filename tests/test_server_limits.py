"""The server at its edges (tiny Qwen2, context 512, a KV cache of 199 tokens): a prompt far longer
than the context is refused before it is tokenized, so a small request sent with it is not held up
and the tokenizer worker gives its memory back; a request without max_tokens is capped at what the
KV cache holds (with a warning at start-up) instead of refused; validation refuses what the sampler
cannot do, under the parameter's own name, and every numeric field at its float extremes gets a
200 or a 4xx, never a 5xx, with every process still up."""

from __future__ import annotations

import json
import threading
import time

import httpx
import psutil
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minisgl.testing.server import RunningServer

pytestmark = pytest.mark.timeout(300)

KV_TOKENS = 199  # --num-pages 200 with one-token pages, one page reserved
CONTEXT = 512  # the tiny models' context
DEADLINE_S = 60.0  # generous: these answers take well under a second alone


@pytest.fixture(scope="module")
def server(tiny_model_dir):
    args = ["--model", str(tiny_model_dir("qwen2")), "--device", "cpu", "--dtype", "float32", "--num-pages", "200",
            "--max-body-mb", "64", "--log-level", "info"]
    with RunningServer(args) as running:
        yield running


def post(server: RunningServer, path: str, body: object) -> httpx.Response:
    content = body if isinstance(body, (str, bytes)) else json.dumps(body)
    return httpx.post(f"{server.base_url}{path}", content=content, headers={"Content-Type": "application/json"},
                      timeout=DEADLINE_S)


def rss(pid: int) -> int:
    return psutil.Process(pid).memory_info().rss


def test_a_huge_prompt_is_refused_unread_and_holds_up_nobody(server):
    tokenizer = server.child_pid("minisgl-tokenizer-0")
    small = {"prompt": "hello", "max_tokens": 2, "temperature": 0}
    assert post(server, "/v1/completions", small).status_code == 200  # the worker has served one request
    before = rss(tokenizer)
    huge: dict[str, object] = {}

    def send_huge() -> None:
        began = time.monotonic()
        response = post(server, "/v1/completions", {"prompt": "hello world " * 4_200_000, "max_tokens": 2})  # 50 MB
        huge.update(status=response.status_code, error=response.json()["error"], seconds=time.monotonic() - began)

    sender = threading.Thread(target=send_huge)
    sender.start()
    began = time.monotonic()
    small_answer = post(server, "/v1/completions", small)  # sent while the huge one is on its way
    small_seconds = time.monotonic() - began
    sender.join(DEADLINE_S)
    assert small_answer.status_code == 200 and not sender.is_alive()
    assert huge["status"] == 400
    # refused by its size in bytes, before any tokenizing (the token count would be in the message)
    assert "the prompt has 50400000 bytes" in huge["error"]["message"]  # type: ignore[index]
    # the worker handles requests in order: once this one is answered, the huge one is long gone
    assert post(server, "/v1/completions", small).status_code == 200
    after = rss(tokenizer)
    print(f"50 MB prompt: 400 in {huge['seconds']:.2f} s; a small request sent with it: {small_seconds:.2f} s; "
          f"tokenizer RSS {before / 2**20:.0f} MiB before, {after / 2**20:.0f} MiB after")
    assert after - before < 64 * 2**20, (before, after)


def test_a_request_without_max_tokens_is_capped_at_the_kv_cache(server):
    assert (f"the KV cache holds {KV_TOKENS} tokens, less than the model's context of {CONTEXT}"
            in server.log())  # said at start-up
    body = {"messages": [{"role": "user", "content": "hi"}], "ignore_eos": True, "temperature": 0}
    for extra in ({}, {"max_tokens": 1000}):  # omitted, or more than fits: capped like at the context
        answer = post(server, "/v1/chat/completions", {**body, **extra})
        assert answer.status_code == 200, answer.text
        assert answer.json()["usage"]["total_tokens"] == KV_TOKENS
        assert answer.json()["choices"][0]["finish_reason"] == "length"
    too_long = post(server, "/generate", {"input_ids": [5] * (KV_TOKENS + 1)})
    assert too_long.status_code == 400 and "--num-pages" in too_long.json()["error"]["message"]


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"top_p": 1e-46}, "top_p"),  # positive, but 0 in the sampler's float32
        ({"top_p": 7e-46}, "top_p"),
        ({"max_tokens": 0, "max_completion_tokens": 5}, "max_tokens"),  # each given limit is checked
        ({"max_tokens": -5, "max_completion_tokens": 5}, "max_tokens"),
        ({"max_tokens": 2**64, "max_completion_tokens": 5}, "max_tokens"),
        ({"max_tokens": 5, "max_completion_tokens": 0}, "max_completion_tokens"),
    ],
)
def test_validation_refuses_what_the_sampler_cannot_do(server, fields, param):
    body = {"messages": [{"role": "user", "content": "hi"}], **fields}
    answer = post(server, "/v1/chat/completions", body)
    assert answer.status_code == 400 and answer.json()["error"]["param"] == param, answer.text


def test_the_smallest_top_p_the_sampler_keeps_is_accepted(server):
    body = {"messages": [{"role": "user", "content": "hi"}], "top_p": 1.5e-45, "max_tokens": 3}
    assert post(server, "/v1/chat/completions", body).status_code == 200


# Every numeric field of the three endpoints, and the literal values it is sampled at: float and
# integer extremes as JSON can write them, and a few it cannot (NaN, Infinity), which must be a 400 too.
EXTREMES = ["0", "-0.0", "1", "-1", "0.5", "5e-324", "2.2250738585072014e-308", "1e-46", "7e-46", "1e-45",
            "1.7976931348623157e308", "1e308", "1e999", "-1e999", "2147483647", "2147483648", "9223372036854775807",
            "18446744073709551616", "-18446744073709551616", "NaN", "Infinity", "-Infinity", "1.0", "100", "-100.5"]
CHAT_FIELDS = ["temperature", "top_p", "top_k", "max_tokens", "max_completion_tokens", "seed", "frequency_penalty",
               "presence_penalty", "logit_bias.7"]
NATIVE_FIELDS = ["max_new_tokens", "temperature", "top_p", "top_k", "seed", "frequency_penalty", "presence_penalty",
                 "logit_bias.7", "stop_token_ids.0"]


def _with_number(path: str, field: str, literal: str) -> tuple[str, str]:
    """(endpoint, raw JSON body) with `field` (a.b: nested) written as `literal`, everything else small."""
    name, _, key = field.partition(".")
    if key == "0":
        value = f"[{literal}]"
    elif key:
        value = f'{{"{key}": {literal}}}'
    else:
        value = literal
    if path == "/generate":
        limit = "" if name == "max_new_tokens" else '"max_new_tokens": 2, '
        return path, f'{{"text": "hi", "sampling_params": {{{limit}"{name}": {value}}}}}'
    limit = "" if name in ("max_tokens", "max_completion_tokens") else '"max_tokens": 2, '
    return path, f'{{"messages": [{{"role": "user", "content": "hi"}}], {limit}"{name}": {value}}}'


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(case=st.one_of(st.tuples(st.just("/v1/chat/completions"), st.sampled_from(CHAT_FIELDS)),
                      st.tuples(st.just("/generate"), st.sampled_from(NATIVE_FIELDS))),
       literal=st.sampled_from(EXTREMES) | st.floats().map(repr) | st.integers().map(str))
def test_every_numeric_field_at_its_extremes_is_a_200_or_a_4xx_naming_it(server, case, literal):
    path, field = case
    endpoint, body = _with_number(path, field, literal)
    answer = post(server, endpoint, body)
    assert answer.status_code == 200 or 400 <= answer.status_code < 500, (body, answer.text)
    if answer.status_code != 200:  # refused by validation under its own name, never by the sampler
        error = answer.json()["error"]
        not_json = literal.lstrip("-") in ("NaN", "Infinity", "nan", "inf")  # Python's repr of the same
        assert field.split(".")[0] in (error["param"] or "").split(".") or not_json, (body, error)
    assert httpx.get(f"{server.base_url}/health", timeout=DEADLINE_S).status_code == 200, server.log()[-2000:]
