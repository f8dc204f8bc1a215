"""The OpenAI-compatible API on a real server process (tiny Llama, tp = 2): the official `openai`
client, streaming and not; 64 concurrent streams that each match the offline `LLM` token for
token; stop strings; /v1/models, /v1/models/{id} and /health; the explicit nulls SDKs and frameworks
send for fields the server does not implement."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from openai import BadRequestError, NotFoundError, OpenAI

from minisgl import LLM, SamplingParams
from minisgl.testing.server import RunningServer

pytestmark = pytest.mark.timeout(300)

NUM_CONCURRENT = 64
MAX_TOKENS = 16


@pytest.fixture(scope="module")
def model_dir(tiny_model_dir):
    return tiny_model_dir("llama")


@pytest.fixture(scope="module")
def server(model_dir):
    with RunningServer(["--model", str(model_dir), "--tp-size", "2", "--device", "cpu", "--dtype", "float32",
                        "--num-tokenizers", "2", "--log-level", "warning"]) as running:
        yield running


@pytest.fixture(scope="module")
def client(server):
    return OpenAI(base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0, timeout=60)


def prompts() -> list[str]:
    return [f"request {i}: " + " ".join(str(n) for n in range(i, i + 3 + i % 5)) for i in range(NUM_CONCURRENT)]


def test_models_and_health(server, client):
    assert [m.id for m in client.models.list().data] == ["llama"]
    assert client.models.retrieve("llama").id == "llama"
    with pytest.raises(NotFoundError, match="does not exist"):
        client.models.retrieve("another-model")
    health = httpx.get(f"{server.base_url}/health").json()
    assert health["status"] == "ok"


def test_completion_whole_and_streamed_agree(client):
    whole = client.completions.create(model="llama", prompt="The key value cache", max_tokens=12, temperature=0)
    choice = whole.choices[0]
    assert choice.finish_reason == "length"
    assert whole.usage.completion_tokens == 12 and whole.usage.prompt_tokens > 0
    assert whole.usage.total_tokens == whole.usage.prompt_tokens + 12
    chunks = list(client.completions.create(model="llama", prompt="The key value cache", max_tokens=12,
                                            temperature=0, stream=True, stream_options={"include_usage": True}))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == choice.text
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].usage.completion_tokens == 12


def test_chat_whole_and_streamed_agree(client):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is a scheduler?"}]
    whole = client.chat.completions.create(model="llama", messages=messages, max_completion_tokens=10,
                                           temperature=0)
    assert whole.choices[0].message.role == "assistant"
    assert whole.choices[0].finish_reason in ("stop", "length")
    chunks = list(client.chat.completions.create(model="llama", messages=messages, max_tokens=10, temperature=0,
                                                 stream=True))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == whole.choices[0].message.content
    assert chunks[-1].choices[0].finish_reason == whole.choices[0].finish_reason


def test_same_seed_same_sample(client):
    def sample(seed: int) -> str:
        return client.completions.create(model="llama", prompt="Sampling picks", max_tokens=8, temperature=1.0,
                                         top_p=0.9, seed=seed, extra_body={"top_k": 50}).choices[0].text

    assert sample(11) == sample(11)


def test_stop_string_ends_output_before_it(client):
    kwargs = dict(model="llama", prompt="Tensor parallelism splits", max_tokens=24, temperature=0,
                  extra_body={"ignore_eos": True})
    full = client.completions.create(**kwargs).choices[0].text
    stop = full[len(full) // 2 : len(full) // 2 + 3]
    assert stop.strip(), f"need a visible stop string in {full!r}"
    expected = full[: full.index(stop)]
    whole = client.completions.create(stop=[stop], **kwargs).choices[0]
    assert (whole.text, whole.finish_reason) == (expected, "stop")
    streamed = "".join(c.choices[0].text for c in client.completions.create(stop=stop, stream=True, **kwargs))
    assert streamed == expected


def test_64_concurrent_streams_match_offline_llm(server, model_dir):
    with LLM(model_dir, dtype="float32") as llm:
        greedy = SamplingParams(temperature=0, max_tokens=MAX_TOKENS)
        expected = [out.token_ids for out in llm.generate(prompts(), greedy)]

    async def stream_one(client: httpx.AsyncClient, prompt: str) -> tuple[list[int], str | None]:
        body = {"text": prompt, "stream": True, "sampling_params": {"temperature": 0, "max_new_tokens": MAX_TOKENS}}
        token_ids: list[int] = []
        reason = None
        async with client.stream("POST", f"{server.base_url}/generate", json=body) as response:
            assert response.status_code == 200
            async for line in response.aiter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    chunk = json.loads(line[len("data: "):])
                    token_ids += chunk["output_ids"]
                    reason = chunk["finish_reason"] or reason
        return token_ids, reason

    async def run_all() -> list[tuple[list[int], str | None]]:
        async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=NUM_CONCURRENT)) as client:
            return await asyncio.gather(*(stream_one(client, p) for p in prompts()))

    results = asyncio.run(run_all())
    for i, ((token_ids, reason), want) in enumerate(zip(results, expected)):
        assert token_ids == want, f"request {i}"
        assert reason in ("stop", "length")


def test_generate_whole_returns_ids_and_usage(server):
    body = {"text": "hello", "sampling_params": {"temperature": 0, "max_new_tokens": 5, "ignore_eos": True}}
    answer = httpx.post(f"{server.base_url}/generate", json=body, timeout=60).json()
    assert len(answer["output_ids"]) == 5 and answer["finish_reason"] == "length"
    assert answer["usage"]["completion_tokens"] == 5


# What OpenAI's schema allows and frameworks send as "not set": each null must mean absent.
EXPLICIT_NULLS = {"tools": None, "tool_choice": None, "response_format": None, "parallel_tool_calls": None,
                  "metadata": None, "top_logprobs": None, "logprobs": None, "n": None, "seed": None,
                  "stop": None, "stream_options": None, "user": None, "frequency_penalty": None}


def test_explicit_nulls_mean_absent_and_values_are_still_refused(client):
    messages = [{"role": "user", "content": "What is a scheduler?"}]
    plain = client.chat.completions.create(model="llama", messages=messages, max_tokens=6, temperature=0)
    nulls = client.chat.completions.create(model="llama", messages=messages, max_tokens=6, temperature=0,
                                           extra_body={**EXPLICIT_NULLS, "logit_bias": {"1": 0.0}})  # keys stay ids
    text_format = client.chat.completions.create(model="llama", messages=messages, max_tokens=6, temperature=0,
                                                 response_format={"type": "text"})
    assert nulls.choices[0].message.content == plain.choices[0].message.content
    assert text_format.choices[0].message.content == plain.choices[0].message.content
    completion = client.completions.create(model="llama", prompt="The key", max_tokens=4, temperature=0,
                                           extra_body={"suffix": None, "best_of": None, "echo": None})
    assert completion.usage.completion_tokens == 4
    refused = [({"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools"),
               ({"response_format": {"type": "json_object"}}, "response_format"),
               ({"stream_options": {"include_usage": True}}, "stream_options")]
    for extra, name in refused:
        with pytest.raises(BadRequestError, match=name):
            client.chat.completions.create(model="llama", messages=messages, max_tokens=4, extra_body=extra)
    with pytest.raises(BadRequestError, match="logprobs"):  # 0 asks for the chosen tokens' log-probabilities
        client.completions.create(model="llama", prompt="The key", max_tokens=4, logprobs=0)
