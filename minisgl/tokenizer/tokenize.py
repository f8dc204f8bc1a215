"""Prompt -> token ids (chapter 02): plain text, a chat rendered through the model's chat template,
or ids given directly. `encode_text` and `encode_chat` are the one way a prompt becomes ids, for
the server's tokenizer workers and the offline `LLM` alike; `PromptTokenizer` then applies the
request rules (`check_request`: empty, too long, ids outside the vocabulary) before the request
can reach rank 0.

A prompt far too long for the context is refused before it is tokenized: no token stands for more
than `max_bytes_per_token` bytes of text, so a text of more than context x that many bytes cannot
fit whatever its tokens. Tokenizing it anyway would hold the worker (and every request behind it)
for seconds per megabyte, and grow its memory by gigabytes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from transformers import AutoTokenizer

from minisgl.core import RequestError, check_request
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


UTF8_MAX_BYTES = 4  # of one character


def max_bytes_per_token(tokenizer: Any) -> int:
    """An upper bound on the bytes of prompt text one token stands for. A vocabulary token stands
    for its decoded text (+1: a SentencePiece decoder drops the space a leading `▁` means); an added
    token (`<|im_start|>`, ...) is matched in the raw text, so it stands for its own text. A
    normalizer (NFC, NFKC, lowercase) may first turn a character of up to 4 bytes into one of 1 byte
    (NFKC's mathematical letters into ASCII), so with one the bound is 4 times as large."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:  # a tokenizer without the Rust one: its raw pieces, and any normalization
        return max(len(token.encode()) + 1 for token in tokenizer.get_vocab()) * UTF8_MAX_BYTES
    added = tokenizer.get_added_vocab()
    decode = backend.decoder.decode if backend.decoder is not None else "".join
    longest = max(len(decode([token]).encode()) + 1 for token in tokenizer.get_vocab() if token not in added)
    longest = max([longest, *(len(token.encode()) for token in added)])
    return longest * (UTF8_MAX_BYTES if backend.normalizer is not None else 1)


def prompt_bytes(request: TokenizeRequest) -> int:
    """UTF-8 bytes of the request's text (a chat: its messages' contents); 0 for ids."""
    texts = [m.get("content") or "" for m in request.messages] if request.messages is not None else [request.text or ""]
    return sum(len(text.encode("utf-8", "surrogatepass")) for text in texts)


class PromptTokenizer:
    def __init__(self, model_path: str | Path) -> None:
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        model_config = ModelConfig.from_dir(model_path)
        self.context_len = model_config.max_position_embeddings
        self.vocab_size = model_config.vocab_size
        self.max_bytes_per_token = max_bytes_per_token(self.tokenizer)

    def prepare(self, request: TokenizeRequest) -> GenerateRequest:
        """The scheduler's request, checked and with max_tokens capped (`check_request`); raises
        `RequestError` for a request this model cannot take."""
        self.check_size(request)
        if request.messages is not None:
            ids = encode_chat(self.tokenizer, request.messages)
        elif request.text is not None:
            ids = encode_text(self.tokenizer, request.text)
        else:
            ids = list(request.input_ids or [])
        sampling = check_request(ids, request.sampling, self.context_len, self.vocab_size)
        return GenerateRequest(request.uid, ids, sampling)

    def check_size(self, request: TokenizeRequest) -> None:
        """Refuse, without tokenizing it, a text with more bytes than the context's tokens can hold."""
        size = prompt_bytes(request)
        if size > self.context_len * self.max_bytes_per_token:
            raise RequestError(
                f"the prompt has {size} bytes; this model's context is {self.context_len} tokens of at most "
                f"{self.max_bytes_per_token} bytes each: shorten the prompt"
            )
