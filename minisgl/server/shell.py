"""`python -m minisgl --shell`: chat with the model in this terminal, on the same processes the
HTTP server would use (chapter 02). The conversation is kept and sent whole each turn; `/reset`
forgets it, `/exit` (or Ctrl-D, or Ctrl-C) leaves."""

from __future__ import annotations

import _thread
import asyncio
import sys

from minisgl.core import SamplingParams

from .args import ServerArgs
from .frontend import Frontend
from minisgl.process import ChildWatcher

from .launch import ServerProcesses

HELP = "/reset forgets the conversation, /exit leaves (so do Ctrl-D and Ctrl-C)"


def run_shell(args: ServerArgs, processes: ServerProcesses, watcher: ChildWatcher) -> None:
    loop = asyncio.new_event_loop()  # one loop for every turn: the frontend's sockets live in it
    asyncio.set_event_loop(loop)
    frontend = loop.run_until_complete(_start(processes))
    # a dead child interrupts whatever the main thread does (input() or a reply) with KeyboardInterrupt
    watcher.on_failure = lambda reason: _thread.interrupt_main()
    watcher.start()
    history: list[dict[str, str]] = []
    sampling = SamplingParams(temperature=0.7, top_p=0.9, max_tokens=args.shell_max_tokens)
    print(f"minisgl shell: chatting with {args.served_model_name}. {HELP}.", flush=True)
    try:
        while True:
            try:
                line = input(">>> ").strip()
            except EOFError:
                print()
                return
            if line == "/exit":
                return
            if line == "/reset":
                history.clear()
                print("(conversation cleared)")
                continue
            if line.startswith("/"):
                print(f"unknown command {line}; {HELP}")
                continue
            if not line:
                continue
            turn = history + [{"role": "user", "content": line}]
            task = loop.create_task(_reply(frontend, turn, sampling))
            try:
                reply = loop.run_until_complete(task)
            except KeyboardInterrupt:  # let the reply's `finally` abort its request before we go
                task.cancel()
                loop.run_until_complete(asyncio.gather(task, return_exceptions=True))
                raise
            if reply is not None:
                history[:] = turn + [{"role": "assistant", "content": reply}]
    finally:
        loop.run_until_complete(frontend.close())
        loop.close()


async def _start(processes: ServerProcesses) -> Frontend:
    frontend = Frontend(processes.addrs, max_pending=1)
    frontend.start()
    return frontend


async def _reply(frontend: Frontend, messages: list[dict[str, str]], sampling: SamplingParams) -> str | None:
    """Stream the assistant's answer to stdout as it is generated; return it whole (None: error)."""
    stream = frontend.submit(sampling, messages=messages)
    text = ""
    try:
        while not stream.finished:
            output = await stream.next()
            if output.error is not None:
                print(f"(error: {output.error})", flush=True)
                return None
            sys.stdout.write(output.text)
            sys.stdout.flush()
            text += output.text
    finally:
        stream.close()
    print(flush=True)
    return text
