"""The embedded SmolLM2 behind the server: it knows Paris, streams Chinese and emoji without a
broken character, and answers the same greedy text at tp = 3 as at tp = 1."""

from __future__ import annotations

import pytest
from openai import OpenAI

from minisgl.testing.server import RunningServer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

PARIS = [{"role": "user", "content": "What is the capital of France?"}]
CHINESE = [{"role": "user", "content": "请用中文介绍一下北京，并加上一些表情符号。"}]
PROMPTS = ["The three primary colors are", "def fibonacci(n):"]


def start(tp_size: int) -> RunningServer:
    return RunningServer(["--tp-size", str(tp_size), "--device", "cpu", "--dtype", "float32", "--log-level", "warning"])


@pytest.fixture(scope="module")
def tp1():
    with start(1) as server:
        yield OpenAI(base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0, timeout=120)


def greedy_answers(client: OpenAI) -> list[str]:
    answers = [client.chat.completions.create(model="SmolLM2-135M-Instruct", messages=PARIS, temperature=0,
                                              max_tokens=16).choices[0].message.content]
    for prompt in PROMPTS:
        answers.append(client.completions.create(model="SmolLM2-135M-Instruct", prompt=prompt, temperature=0,
                                                 max_tokens=16).choices[0].text)
    return answers


def test_knows_the_capital_of_france(tp1):
    answer = tp1.chat.completions.create(model="SmolLM2-135M-Instruct", messages=PARIS, temperature=0)
    assert "Paris" in answer.choices[0].message.content
    assert answer.choices[0].finish_reason == "stop"
    assert answer.usage.completion_tokens > 0


def test_chinese_and_emoji_stream_without_broken_characters(tp1):
    kwargs = dict(model="SmolLM2-135M-Instruct", messages=CHINESE, temperature=0, max_tokens=40)
    chunks = [c.choices[0].delta.content or "" for c in tp1.chat.completions.create(stream=True, **kwargs)]
    text = "".join(chunks)
    assert any(ord(ch) > 0x2E80 for ch in text), f"expected CJK output, got {text!r}"
    # a reply cut by max_tokens may end inside a character; before the end, never
    assert not any("\ufffd" in chunk for chunk in chunks[:-2]), chunks
    assert text == tp1.chat.completions.create(**kwargs).choices[0].message.content


def test_stop_string_on_a_real_model(tp1):
    kwargs = dict(model="SmolLM2-135M-Instruct", messages=PARIS, temperature=0)
    answer = tp1.chat.completions.create(stop=["Paris"], **kwargs).choices[0]
    assert "Paris" not in answer.message.content and answer.finish_reason == "stop"
    streamed = "".join(c.choices[0].delta.content or "" for c in tp1.chat.completions.create(stop="Paris", stream=True,
                                                                                                 **kwargs))
    assert streamed == answer.message.content


def test_tp3_answers_like_tp1(tp1):
    expected = greedy_answers(tp1)
    with start(3) as server:
        tp3 = OpenAI(base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0, timeout=120)
        assert greedy_answers(tp3) == expected
