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

With data parallelism (chapter 12) `scheduler` is read by the DP controller, and each replica gets
its own view, `for_replica(i)`: its own rank-0 `scheduler` and `broadcast` addresses, and the
controller's address as `controller`, where its rank 0 reports finished requests. Across machines
`broadcast` is a tcp:// address on node 0, the only socket the other nodes reach.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class IpcAddresses:
    scheduler: str
    broadcast: str
    detokenizer: str
    api: str
    tokenizers: tuple[str, ...] = ()
    controller: str = ""  # the DP controller's inbox, in a replica's view (`for_replica`); else none

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

    def for_replica(self, index: int) -> IpcAddresses:
        """What data-parallel replica `index` uses: its own rank-0 inbox and broadcast, and the run's
        `scheduler` address, which the DP controller reads, as `controller`."""
        return replace(self, scheduler=f"{self.scheduler}-dp{index}", broadcast=f"{self.broadcast}-dp{index}",
                       controller=self.scheduler)
