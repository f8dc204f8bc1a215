"""Prompt -> token ids, in the server's tokenizer workers (chapter 02): plain text, a chat rendered
through the model's chat template, or ids given directly. Every check that needs the token count
(empty prompt, longer than the context, ids outside the vocabulary) happens here, before the
request can reach rank 0."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from transformers import AutoTokenizer

from minisgl.message import GenerateRequest, TokenizeRequest
from minisgl.models.config import ModelConfig


class PromptError(ValueError):
    """A prompt this model cannot take; the message says why (the API answers it with a 400)."""


class PromptTokenizer:
    def __init__(self, model_path: str | Path) -> None:
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        model_config = ModelConfig.from_dir(model_path)
        self.context_len = model_config.max_position_embeddings
        self.vocab_size = model_config.vocab_size

    def encode(self, request: TokenizeRequest) -> list[int]:
        """The prompt's token ids, tokenized exactly as the offline `LLM` does."""
        if request.messages is not None:
            text = self.tokenizer.apply_chat_template(request.messages, add_generation_prompt=True, tokenize=False)
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        elif request.text is not None:
            ids = self.tokenizer(request.text)["input_ids"]
        else:
            ids = list(request.input_ids or [])
            outside = [i for i in ids if not 0 <= i < self.vocab_size]
            if outside:
                raise PromptError(f"token id {outside[0]} is outside the vocabulary [0, {self.vocab_size})")
        if not ids:
            raise PromptError("the prompt is empty")
        if len(ids) >= self.context_len:
            raise PromptError(
                f"the prompt has {len(ids)} tokens; this model's context is {self.context_len} tokens"
                " (prompt plus at least one new token): shorten the prompt"
            )
        return ids

    def prepare(self, request: TokenizeRequest) -> GenerateRequest:
        """The scheduler's request. max_tokens is capped at what the context leaves after the prompt,
        so an unset (or too large) limit means "until the context is full"."""
        ids = self.encode(request)
        room = self.context_len - len(ids)
        sampling = replace(request.sampling, max_tokens=min(request.sampling.max_tokens, room))
        return GenerateRequest(request.uid, ids, sampling)
