"""`LLM`: generate from Python without a server. At tp = 1 the scheduler runs in this process; at
tp > 1 every rank is a real spawned process, as in the server (chapter 00); with dp_size > 1, so
are the replicas and their controller (chapter 12); with pp_size > 1, so is every pipeline stage
(chapter 13)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from transformers import AutoTokenizer

from minisgl.config import SchedulerConfig, resolve_config
from minisgl.core import SamplingParams, check_request
from minisgl.distributed import DistributedInfo
from minisgl.message import GenerateRequest, SchedulerStats, TokenOutput
from minisgl.models.config import ModelConfig
from minisgl.process.start import start_child_server
from minisgl.tokenizer.tokenize import encode_chat, encode_text
from minisgl.trace import TRACE

from .backends import InProcessBackend, MultiProcessBackend


@dataclass
class RequestOutput:
    prompt_token_ids: list[int]
    token_ids: list[int]
    text: str
    finish_reason: str | None


class LLM:
    """An engine on `model` (None: the embedded SmolLM2) with `tp_size` ranks on `device` in each of
    `pp_size` pipeline stages; `dp_size` replicas of them, which get the requests by `dp_policy`
    ("round-robin" or "least-load"). With a `trace` folder, every process records its timeline,
    merged into `trace/trace.json` at `shutdown` (`minisgl.trace`). Any other `SchedulerConfig` field
    may be given by name (`num_pages=512`, `dist_backend="gloo"`, ...).

    `config` is the checked launch config (`minisgl.config.resolve_config`); at tp = 1 it is the
    engine's, with dtype "auto" as measured. `backend` drives the schedulers: `InProcessBackend`
    (its `engine`, `scheduler` and `io` are there to look into) or `MultiProcessBackend`."""

    def __init__(
        self,
        model: str | Path | None = None,
        tp_size: int = 1,
        device: str = "cpu",
        dtype: str = "auto",
        dp_size: int = 1,
        dp_policy: str = "round-robin",
        pp_size: int = 1,
        trace: str | Path | None = None,
        **engine_args: Any,
    ) -> None:
        if model is None:
            from minisgl.models.default_model import ensure_default_model

            model = ensure_default_model()
        self.model_path = Path(model)
        self.trace_dir = None if trace is None else Path(trace)
        # one machine: the ranks, their store and their stage groups are this process's to place
        internal = {"model_path", "tp_info", "pp_info", "dp_rank", "nnodes", "dist_init_addr", "trace_dir"}
        known = {f.name for f in fields(SchedulerConfig)} - internal
        unknown = sorted(set(engine_args) - known)
        if unknown:
            raise TypeError(f"unknown engine argument(s) {unknown}; known: {sorted(known)}")
        # every launch setting checked before any spawn (tp vs heads, backends, the machine, ...)
        self.config = config = resolve_config(SchedulerConfig(
            model_path=self.model_path, tp_info=DistributedInfo(0, tp_size), pp_info=DistributedInfo(0, pp_size),
            device=device, dtype=dtype, dp_size=dp_size, dp_policy=dp_policy,
            trace_dir=None if trace is None else str(trace), **engine_args))
        self.model_config = ModelConfig.from_dir(self.model_path)
        in_process = tp_size == 1 and dp_size == 1 and pp_size == 1
        if not in_process:
            start_child_server()  # its imports overlap our tokenizer load below
        self.tokenizer = _load_tokenizer(self.model_path)
        if trace is not None:
            TRACE.start(trace, "minisgl-llm")  # before the backend: at tp = 1 the engine's start-up is ours
        try:
            self.backend = InProcessBackend(config) if in_process else MultiProcessBackend(config)
        except BaseException:
            TRACE.stop()
            raise
        if in_process:
            self.config = self.backend.engine.config  # with dtype "auto" and the batch limits as the engine set them
        self._uids = itertools.count()

    def generate(
        self,
        prompts: str | list[int] | list[str] | list[list[int]],
        sampling_params: SamplingParams | list[SamplingParams] | None = None,
    ) -> list[RequestOutput]:
        """Complete each prompt (a string or a list of token ids); outputs come back in prompt order."""
        batch = _as_prompt_list(prompts)
        if isinstance(sampling_params, list):
            params = sampling_params
        else:
            params = [sampling_params or SamplingParams()] * len(batch)
        if len(params) != len(batch):
            raise ValueError(f"{len(batch)} prompts but {len(params)} sampling params")
        requests = [self._request(self._token_ids(p), sp) for p, sp in zip(batch, params)]
        tokens = self._run(requests)
        return [
            RequestOutput(
                request.input_ids,
                tokens[request.uid][0],
                self._decode(tokens[request.uid][0]),
                tokens[request.uid][1],
            )
            for request in requests
        ]

    def chat(
        self, messages: list[dict[str, str]] | list[list[dict[str, str]]], sampling_params: SamplingParams | None = None
    ) -> list[RequestOutput]:
        """Apply the model's chat template to one conversation (or several), then generate."""
        conversations = [messages] if messages and isinstance(messages[0], dict) else messages
        self._require_tokenizer()
        return self.generate([encode_chat(self.tokenizer, conv) for conv in conversations], sampling_params)

    def submit(self, prompt: str | list[int], sampling_params: SamplingParams | None = None) -> int:
        """Send one prompt now and return its uid; its tokens arrive through `collect`. For a client
        that sends a request when an earlier one has finished, as a chat does (chapter 11)."""
        request = self._request(self._token_ids(prompt), sampling_params or SamplingParams())
        self.backend.submit([request])
        return request.uid

    def collect(self) -> list[TokenOutput]:
        """The outputs of submitted requests that arrived since the last call (at least one: it waits)."""
        return self.backend.collect()

    def stats(self) -> SchedulerStats:
        """Rank 0's counters (`/metrics`'s, chapter 11): exact at tp = 1; with spawned ranks, the last
        report `collect` saw (rank 0 sends one about once a second)."""
        return self.backend.stats()

    def _token_ids(self, prompt: str | list[int]) -> list[int]:
        if isinstance(prompt, list):
            return list(prompt)
        self._require_tokenizer()
        return encode_text(self.tokenizer, prompt)

    def _request(self, input_ids: list[int], sampling: SamplingParams) -> GenerateRequest:
        """Checked as the server's tokenizer workers check it: raises `RequestError` (a ValueError)."""
        config = self.model_config
        sampling = check_request(input_ids, sampling, config.max_position_embeddings, config.vocab_size)
        return GenerateRequest(next(self._uids), input_ids, sampling)

    def _decode(self, token_ids: list[int]) -> str:
        return "" if self.tokenizer is None else self.tokenizer.decode(token_ids, skip_special_tokens=True)

    def _require_tokenizer(self) -> None:
        if self.tokenizer is None:
            raise ValueError(f"'{self.model_path}' has no tokenizer files; pass prompts as lists of token ids")

    def _run(self, requests: list[GenerateRequest]) -> dict[int, tuple[list[int], str | None]]:
        # traced before the submit: once sent, the ranks may act on them while this process waits for a core
        if TRACE.enabled:
            TRACE.instant("request in", "request", uids=[r.uid for r in requests])
        self.backend.submit(list(requests))
        tokens: dict[int, list[int]] = {r.uid: [] for r in requests}
        finished: dict[int, tuple[list[int], str | None]] = {}
        while len(finished) < len(requests):
            for output in self.backend.collect():
                self._absorb(output, tokens, finished)
        return finished

    @staticmethod
    def _absorb(output: TokenOutput, tokens: dict[int, list[int]], finished: dict) -> None:
        if output.error is not None:
            raise ValueError(output.error)
        tokens[output.uid] += output.token_ids
        if output.finished:
            finished[output.uid] = (tokens[output.uid], output.finish_reason)
            TRACE.instant("request out", "request", uid=output.uid, reason=output.finish_reason)

    def shutdown(self) -> None:
        backend, self.backend = getattr(self, "backend", None), None
        if backend is not None:
            backend.close()
            if self.trace_dir is not None:
                TRACE.finish()  # every rank has exited and written its file: merge them

    def __enter__(self) -> LLM:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def __del__(self) -> None:
        self.shutdown()


def _load_tokenizer(model_path: Path) -> Any:
    """The checkpoint's tokenizer, or None for a config-only directory (token-id prompts only)."""
    if not any((model_path / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json")):
        return None
    return AutoTokenizer.from_pretrained(model_path)


def _as_prompt_list(prompts: Any) -> list[str | list[int]]:
    if isinstance(prompts, str):
        return [prompts]
    if prompts and isinstance(prompts[0], int):
        return [list(prompts)]
    return list(prompts)
