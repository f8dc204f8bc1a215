"""The server's text side without processes: incremental detokenization (UTF-8, stop strings),
the detokenizer's bookkeeping, the frontend messages' wire format, and request validation."""

from __future__ import annotations

import json

import pytest
from transformers import AutoTokenizer

from minisgl.core import RequestError, SamplingParams
from minisgl.message import (
    AbortRequest,
    DetokenizeStart,
    TextOutput,
    TokenizeRequest,
    TokenOutput,
    decode_message,
    encode_message,
)
from minisgl.server.protocol import ApiError, ChatCompletionRequest, CompletionRequest, parse_body, sampling_from_openai
from minisgl.tokenizer import Detokenizer, TextStream
from minisgl.tokenizer.tokenize import PromptTokenizer

MIXED_TEXT = "Bonjour 你好，世界！🙂👍🏽 naïve café — 日本語のテキスト. Observation: done"


@pytest.fixture(scope="module")
def smol_tokenizer(default_model_dir):
    return AutoTokenizer.from_pretrained(default_model_dir)


def stream_pieces(tokenizer, ids: list[int], stop: list[str]) -> tuple[list[str], TextStream]:
    stream = TextStream(tokenizer, stop)
    pieces = [stream.push([token]) for token in ids[:-1]]
    pieces.append(stream.push(ids[-1:], final=True))
    return pieces, stream


def test_multibyte_text_streams_without_replacement_chars(smol_tokenizer):
    ids = smol_tokenizer(MIXED_TEXT, add_special_tokens=False)["input_ids"]
    assert any("\ufffd" in smol_tokenizer.decode([i]) for i in ids), "the text should split characters over tokens"
    pieces, _ = stream_pieces(smol_tokenizer, ids, stop=[])
    assert all("\ufffd" not in piece for piece in pieces)
    assert "".join(pieces) == MIXED_TEXT


@pytest.mark.parametrize("stop", ["Observation:", "世界", "🙂", "café —"])
def test_stop_string_never_leaks(smol_tokenizer, stop):
    ids = smol_tokenizer(MIXED_TEXT, add_special_tokens=False)["input_ids"]
    pieces, stream = stream_pieces(smol_tokenizer, ids, stop=[stop, "never appears"])
    shown = "".join(pieces)
    assert stream.stopped
    assert shown == MIXED_TEXT[: MIXED_TEXT.index(stop)]
    # no prefix of the stop string was ever shown ahead of time either
    assert all(not shown.endswith(stop[:n]) for n in range(1, len(stop)))


def test_text_that_only_looks_like_a_stop_prefix_is_released(smol_tokenizer):
    ids = smol_tokenizer("Obs is not Observation", add_special_tokens=False)["input_ids"]
    pieces, stream = stream_pieces(smol_tokenizer, ids, stop=["Observe"])
    assert not stream.stopped
    assert "".join(pieces) == "Obs is not Observation"


def test_detokenizer_buffers_early_outputs_and_aborts_on_stop(smol_tokenizer):
    detokenizer = Detokenizer(smol_tokenizer)
    ids = smol_tokenizer("Hello world. The end", add_special_tokens=False)["input_ids"]
    # rank 0's first tokens beat the tokenizer's DetokenizeStart: they wait, nothing is lost
    assert detokenizer.handle(TokenOutput(7, ids[:2])) == ([], [])
    texts, aborts = detokenizer.handle(DetokenizeStart(7, stop=[". The"], prompt_tokens=3))
    assert [t.text for t in texts] == ["Hello world"] and not aborts
    texts, aborts = detokenizer.handle(TokenOutput(7, ids[2:]))
    assert texts[0].finished and texts[0].finish_reason == "stop" and texts[0].text == ""
    assert aborts == [AbortRequest(7)]  # the scheduler would otherwise keep generating
    assert texts[0].completion_tokens == len(ids) and texts[0].prompt_tokens == 3
    assert detokenizer.handle(TokenOutput(7, [1, 2])) == ([], [])  # in flight before the abort: dropped
    assert detokenizer.handle(TokenOutput(7, [], True, "abort")) == ([], [])
    assert not detokenizer.streams and not detokenizer.early


def test_detokenizer_passes_errors_on(smol_tokenizer):
    detokenizer = Detokenizer(smol_tokenizer)
    texts, _ = detokenizer.handle(DetokenizeStart(3, error="the prompt is empty"))
    assert texts == [TextOutput(3, "", [], True, "error", "the prompt is empty")]


def test_frontend_messages_round_trip():
    request = TokenizeRequest(5, SamplingParams(temperature=0.5, max_tokens=9, seed=3), messages=[
        {"role": "user", "content": "hi"}], stop=["\n"])
    assert decode_message(encode_message(request)) == request
    output = TextOutput(5, "你好", [1, 2], True, "stop", None, 4, 2)
    assert decode_message(encode_message(output)) == output


def test_prompt_tokenizer_checks(tiny_model_dir):
    tokenizer = PromptTokenizer(tiny_model_dir("llama"))
    sampling = SamplingParams(max_tokens=10_000)
    request = tokenizer.prepare(TokenizeRequest(1, sampling, text="hello world"))
    assert request.sampling.max_tokens == tokenizer.context_len - len(request.input_ids)  # capped by the context
    with pytest.raises(RequestError, match="context is 512 tokens"):
        tokenizer.prepare(TokenizeRequest(1, sampling, input_ids=[5] * 512))
    with pytest.raises(RequestError, match="outside the vocabulary"):
        tokenizer.prepare(TokenizeRequest(1, sampling, input_ids=[5, 100_000]))
    with pytest.raises(RequestError, match="empty"):
        tokenizer.prepare(TokenizeRequest(1, sampling, input_ids=[]))


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"prompt": "a", "max_tokens": -1}, "max_tokens"),
        ({"prompt": "a", "n": 2}, "n"),
        ({"prompt": "a", "temperature": -0.1}, "temperature"),
        ({"prompt": "a", "top_p": 0}, "top_p"),
        ({"prompt": "a", "logprobs": 2}, "logprobs"),
        ({"prompt": "a", "logprobs": 0}, "logprobs"),  # asks for the chosen tokens' log-probabilities
        ({"prompt": "a", "logprobs": True}, "logprobs"),
        ({"prompt": "a", "stream_options": {"include_usage": True}}, "stream_options"),  # without stream
        ({"prompt": "a", "seed": -1}, "seed"),
    ],
)
def test_bad_sampling_parameters_name_the_parameter(body, param):
    request = parse_body(CompletionRequest, json.dumps(body))
    with pytest.raises(ApiError) as info:
        sampling_from_openai(request, 16)
    assert info.value.status == 400 and info.value.param == param


def test_body_validation_is_a_400_naming_the_field():
    with pytest.raises(ApiError) as info:
        parse_body(ChatCompletionRequest, json.dumps({"messages": [{"role": "wizard", "content": "hi"}]}))
    assert info.value.status == 400 and info.value.param.startswith("messages.0.role")
    with pytest.raises(ApiError):
        parse_body(CompletionRequest, json.dumps({"max_tokens": 3}))  # no prompt


def test_null_means_absent_only_for_optional_and_known_fields():
    body = {"prompt": "a", "n": None, "echo": None, "stream": None, "suffix": None, "best_of": None}
    request = parse_body(CompletionRequest, json.dumps(body))
    assert (request.n, request.echo, request.stream) == (None, False, False)
    sampling_from_openai(request, 16)  # nothing left to refuse
    for body, param in [({"prompt": None}, "prompt"), ({"prompt": "a", "not_openai": None}, "not_openai"),
                        ({"prompt": "a", "suffix": "x"}, "suffix"), ({"messages": None}, "messages")]:
        model = ChatCompletionRequest if "messages" in body else CompletionRequest
        with pytest.raises(ApiError) as info:
            parse_body(model, json.dumps(body))
        assert info.value.status == 400 and info.value.param == param, body


@pytest.mark.parametrize(("response_format", "refused"),
                         [({"type": "text"}, False), ({"type": "json_object"}, True),
                          ({"type": "json_schema", "json_schema": {"name": "x"}}, True)])
def test_response_format_text_is_honoured_and_the_json_modes_are_refused(response_format, refused):
    body = {"messages": [{"role": "user", "content": "hi"}], "response_format": response_format}
    request = parse_body(ChatCompletionRequest, json.dumps(body))
    if not refused:
        sampling_from_openai(request, 16)
        return
    with pytest.raises(ApiError) as info:
        sampling_from_openai(request, 16)
    assert info.value.param == "response_format" and response_format["type"] in info.value.message
