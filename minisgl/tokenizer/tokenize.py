"""Prompt -> token ids (chapter 02): plain text, a chat rendered through the model's chat template,
or ids given directly. `encode_text` and `encode_chat` are the one way a prompt becomes ids, for
the server's tokenizer workers and the offline `LLM` alike; `PromptTokenizer` then applies the
request rules (`check_request`: empty, too long, ids outside the vocabulary) before the request
can reach rank 0."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from transformers import AutoTokenizer

from minisgl.core import check_request
from minisgl.message import GenerateRequest, TokenizeRequest
from minisgl.models.config import ModelConfig


def encode_text(tokenizer: Any, text: str) -> list[int]:
    """Plain text, with the tokenizer's special tokens (a BOS where the model wants one)."""
    return tokenizer(text)["input_ids"]


def encode_chat(tokenizer: Any, messages: list[dict[str, Any]]) -> list[int]:
    """A conversation through the model's chat template, ending where the assistant's answer starts.
    The template already wrote the special tokens, so none are added again."""
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


class PromptTokenizer:
    def __init__(self, model_path: str | Path) -> None:
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        model_config = ModelConfig.from_dir(model_path)
        self.context_len = model_config.max_position_embeddings
        self.vocab_size = model_config.vocab_size

    def prepare(self, request: TokenizeRequest) -> GenerateRequest:
        """The scheduler's request, checked and with max_tokens capped (`check_request`); raises
        `RequestError` for a request this model cannot take."""
        if request.messages is not None:
            ids = encode_chat(self.tokenizer, request.messages)
        elif request.text is not None:
            ids = encode_text(self.tokenizer, request.text)
        else:
            ids = list(request.input_ids or [])
        sampling = check_request(ids, request.sampling, self.context_len, self.vocab_size)
        return GenerateRequest(request.uid, ids, sampling)
