"""The bodies of the server's text processes (chapter 02): N tokenizer workers and one detokenizer.

    API --TokenizeRequest--> tokenizer i --GenerateRequest--> rank 0 --TokenOutput--> detokenizer --TextOutput--> API
                                         \\--DetokenizeStart (stop strings, or an error)--/

Like a scheduler rank, each reports ("ready" | "error", name, detail) on the launcher's ack queue,
ignores Ctrl-C (the launcher stops it) and exits by itself if the launcher dies.
"""

from __future__ import annotations

import logging
import os
import signal
from multiprocessing.queues import Queue
from pathlib import Path

import zmq

from minisgl.message import AbortRequest, DetokenizeStart, TokenizeRequest, decode_message, encode_message
from minisgl.scheduler.process import exit_when_parent_dies
from minisgl.utils import reporting_start_failure

from .detokenize import Detokenizer
from .tokenize import PromptTokenizer


def run_tokenizer_process(
    name: str, model_path: Path, inbox_addr: str, scheduler_addr: str, detokenizer_addr: str, ack_queue: Queue
) -> None:
    """Tokenize each `TokenizeRequest`: announce it to the detokenizer, then send it to rank 0.
    An `AbortRequest` passes through to rank 0 in order, behind the request it aborts."""
    _become_child(name)
    with reporting_start_failure(ack_queue, name):
        tokenizer = PromptTokenizer(model_path)
        context = zmq.Context()
        inbox = context.socket(zmq.PULL)
        inbox.bind(inbox_addr)
        to_scheduler = context.socket(zmq.PUSH)
        to_scheduler.connect(scheduler_addr)
        to_detokenizer = context.socket(zmq.PUSH)
        to_detokenizer.connect(detokenizer_addr)
    ack_queue.put(("ready", name, ""))
    while True:
        message = decode_message(inbox.recv())
        if isinstance(message, AbortRequest):
            to_scheduler.send(encode_message(message))
            continue
        assert isinstance(message, TokenizeRequest), message
        try:
            request = tokenizer.prepare(message)
        except Exception as error:  # this request is bad, the worker is fine: report and go on
            logging.info("request %d rejected: %s", message.uid, error)
            to_detokenizer.send(encode_message(DetokenizeStart(message.uid, error=_one_line(error))))
            continue
        # the start goes first: the detokenizer must know the stop strings before tokens arrive
        to_detokenizer.send(encode_message(DetokenizeStart(message.uid, message.stop, len(request.input_ids))))
        to_scheduler.send(encode_message(request))


def run_detokenizer_process(
    name: str, model_path: Path, inbox_addr: str, api_addr: str, scheduler_addr: str, ack_queue: Queue
) -> None:
    """Turn rank 0's `TokenOutput`s into `TextOutput`s for the API; abort requests that hit a stop string."""
    _become_child(name)
    with reporting_start_failure(ack_queue, name):
        from transformers import AutoTokenizer

        detokenizer = Detokenizer(AutoTokenizer.from_pretrained(model_path))
        context = zmq.Context()
        inbox = context.socket(zmq.PULL)  # rank 0's outputs and the tokenizers' starts
        inbox.bind(inbox_addr)
        to_api = context.socket(zmq.PUSH)
        to_api.connect(api_addr)
        to_scheduler = context.socket(zmq.PUSH)
        to_scheduler.connect(scheduler_addr)
    ack_queue.put(("ready", name, ""))
    while True:
        message = decode_message(inbox.recv())
        try:
            texts, aborts = detokenizer.handle(message)
        except Exception as error:  # this request's text went wrong; the others go on
            logging.error("request %d failed: %s", message.uid, _one_line(error))
            texts, aborts = detokenizer.fail(message, error)
        for text in texts:
            to_api.send(encode_message(text))
        for abort in aborts:
            to_scheduler.send(encode_message(abort))


def _become_child(name: str) -> None:
    logging.basicConfig(level=os.environ.get("MINISGL_LOG_LEVEL", "WARNING"), format=f"[{name}] %(message)s")
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group; the launcher stops us
    exit_when_parent_dies()


def _one_line(error: Exception) -> str:
    return " ".join(str(error).split()) or type(error).__name__
