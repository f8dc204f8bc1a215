"""`IpcAddresses`: every ZMQ address of one run, built once by the launcher (chapter 02).

Each address is named after the one process that reads from it (and binds it, `queues.py`):

    tokenizers[i]  <- the API pushes TokenizeRequests (and aborts) to tokenizer worker i
    scheduler      <- tokenizers push GenerateRequests (the LLM pushes them itself); rank 0 pulls
    broadcast      <- rank 0 publishes each step's messages; every other rank subscribes
    detokenizer    <- rank 0 pushes TokenOutputs and, once a second, SchedulerStats; tokenizers
                      push DetokenizeStarts; the offline LLM has no detokenizer and reads rank 0's
                      TokenOutputs here itself
    api            <- the detokenizer pushes TextOutputs and passes SchedulerStats on; the API
                      (or the shell) pulls
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class IpcAddresses:
    scheduler: str
    broadcast: str
    detokenizer: str
    api: str
    tokenizers: tuple[str, ...] = ()

    @classmethod
    def in_dir(cls, ipc_dir: str, num_tokenizers: int = 0) -> IpcAddresses:
        """ipc:// sockets in `ipc_dir` (a `ChildGroup`'s folder), one file per address."""
        return cls(
            scheduler=f"ipc://{ipc_dir}/scheduler",
            broadcast=f"ipc://{ipc_dir}/broadcast",
            detokenizer=f"ipc://{ipc_dir}/detokenizer",
            api=f"ipc://{ipc_dir}/api",
            tokenizers=tuple(f"ipc://{ipc_dir}/tokenizer-{i}" for i in range(num_tokenizers)),
        )
