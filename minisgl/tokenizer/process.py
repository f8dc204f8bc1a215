"""The bodies of the server's text processes (chapter 02): N tokenizer workers and one detokenizer.

    API --TokenizeRequest--> tokenizer i --GenerateRequest--> rank 0 --TokenOutput--> detokenizer --TextOutput--> API
                                         \\--DetokenizeStart (stop strings, or an error)--/

Each runs as a child of the server's `ChildGroup` (`minisgl.process`), which acks, logs and stops it
like a scheduler rank.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from minisgl.message import (
    AbortRequest,
    DetokenizeStart,
    IpcAddresses,
    PullQueue,
    PushQueue,
    SchedulerStats,
    TokenizeRequest,
)
from minisgl.process import Ready
from minisgl.trace import TRACE

from .detokenize import Detokenizer

if TYPE_CHECKING:
    from .tokenize import PromptTokenizer

TRIM_ABOVE_BYTES = 1 << 20  # after a prompt this large, give the memory it used back to the OS


def run_tokenizer(index: int, model_path: Path, addrs: IpcAddresses, ready: Ready) -> None:
    """Tokenizer worker `index`: tokenize each `TokenizeRequest`, announce it to the detokenizer,
    then send it to rank 0. An `AbortRequest` passes through to rank 0 in order, behind the
    request it aborts."""
    from .tokenize import PromptTokenizer, prompt_bytes  # here, in the worker: the launcher never tokenizes

    tokenizer = PromptTokenizer(model_path)
    inbox = PullQueue(addrs.tokenizers[index])
    to_scheduler = PushQueue(addrs.scheduler)
    to_detokenizer = PushQueue(addrs.detokenizer)
    ready()
    while True:
        message = inbox.get()
        if isinstance(message, AbortRequest):
            to_scheduler.put(message)
            continue
        assert isinstance(message, TokenizeRequest), message
        huge = prompt_bytes(message) > TRIM_ABOVE_BYTES
        _tokenize_and_send(tokenizer, message, to_scheduler, to_detokenizer)
        if huge:
            del message  # the huge text itself, before the trim
            release_free_memory()


def _tokenize_and_send(tokenizer: PromptTokenizer, message: TokenizeRequest, to_scheduler: PushQueue,
                       to_detokenizer: PushQueue) -> None:
    try:
        with TRACE.span("tokenize", "text", uid=message.uid):
            request = tokenizer.prepare(message)
    except Exception as error:  # this request is bad, the worker is fine: report and go on
        logging.info("request %d rejected: %s", message.uid, error)
        to_detokenizer.put(DetokenizeStart(message.uid, error=_one_line(error)))
        return
    # the start goes first: the detokenizer must know the stop strings before tokens arrive
    to_detokenizer.put(DetokenizeStart(message.uid, message.stop, len(request.input_ids)))
    to_scheduler.put(request)


def run_detokenizer(model_path: Path, addrs: IpcAddresses, ready: Ready) -> None:
    """Turn rank 0's `TokenOutput`s into `TextOutput`s for the API; abort requests that hit a stop string;
    pass rank 0's `SchedulerStats` on to the API."""
    from transformers import AutoTokenizer

    detokenizer = Detokenizer(AutoTokenizer.from_pretrained(model_path))
    inbox = PullQueue(addrs.detokenizer)  # rank 0's outputs and the tokenizers' starts
    to_api = PushQueue(addrs.api)
    to_scheduler = PushQueue(addrs.scheduler)
    ready()
    while True:
        message = inbox.get()
        if isinstance(message, SchedulerStats):  # rank 0's numbers for /metrics: passed on as they are
            to_api.put(message)
            continue
        try:
            with TRACE.span("detokenize", "text", uid=message.uid):
                texts, aborts = detokenizer.handle(message)
        except Exception as error:  # this request's text went wrong; the others go on
            logging.error("request %d failed: %s", message.uid, _one_line(error))
            texts, aborts = detokenizer.fail(message, error)
        for text in texts:
            to_api.put(text)
        for abort in aborts:
            to_scheduler.put(abort)


_LIBC = ctypes.CDLL(ctypes.util.find_library("c"))


def release_free_memory() -> None:
    """Give freed heap memory back to the OS. glibc keeps what a process frees for its next
    allocations, so a worker that once held a huge prompt (its text, its tokenization) would stay
    that large for good; malloc_trim returns the free pages (glibc only; elsewhere nothing)."""
    trim = getattr(_LIBC, "malloc_trim", None)
    if trim is not None:
        trim(0)


def _one_line(error: Exception) -> str:
    return " ".join(str(error).split()) or type(error).__name__
