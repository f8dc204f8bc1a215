"""Data parallelism (chapter 12): N independent replicas of the model, each its own TP group with
its own scheduler, KV cache and rank-0 broadcast, behind one controller process that decides
which replica serves each request.

    tokenizers / LLM --GenerateRequest--> DP controller --> replica 0: TP0, TP1, ...
                                                        \\-> replica 1: TP0, TP1, ...
    replica's rank 0 --TokenOutput--> detokenizer / LLM (straight, not through the controller)
    replica's rank 0 --FinishedRequests--> DP controller

The controller reads the run's `scheduler` address, so nothing that sends requests, aborts or the
shutdown changes. It keeps the number of unfinished requests of each replica: one more when it
sends a request there, fewer when that replica's rank 0 reports requests finished (once per step,
with its outputs). That number is the replica's waiting + running requests, as vLLM's client
balances by, without asking the replicas. Two policies:
- `round-robin` (SGLang's default): replica 0, 1, ..., N - 1, 0, ... whatever their load;
- `least-load`: the replica with the fewest unfinished requests; ties go to the lowest index.
"""

from __future__ import annotations

import dataclasses
import itertools
from multiprocessing.process import BaseProcess

from minisgl.config import DP_POLICIES, SchedulerConfig
from minisgl.message import (
    AbortRequest,
    FinishedRequests,
    GenerateRequest,
    IpcAddresses,
    PullQueue,
    PushQueue,
    ShutdownRequest,
)
from minisgl.process import ChildGroup, Ready

from .process import spawn_ranks

def pick_replica(policy: str, loads: list[int], num_sent: int) -> int:
    """The replica the next request goes to: `loads[i]` is replica i's unfinished requests,
    `num_sent` how many requests the controller sent before this one."""
    if not loads:
        raise ValueError("no replicas to pick from")
    if policy == "round-robin":
        return num_sent % len(loads)
    if policy == "least-load":
        return min(range(len(loads)), key=lambda i: loads[i])  # min keeps the first of equals
    raise ValueError(f"unknown DP policy {policy!r}; use one of {', '.join(DP_POLICIES)}")


class Dispatcher:
    """The controller's bookkeeping: where each unfinished request went, and each replica's load."""

    def __init__(self, policy: str, num_replicas: int) -> None:
        pick_replica(policy, [0] * num_replicas, 0)  # an unknown policy fails here, at start-up
        self.policy = policy
        self.loads = [0] * num_replicas
        self.replica_of: dict[int, int] = {}  # uid -> replica, until it finishes
        self._num_sent = itertools.count()

    def assign(self, uid: int) -> int:
        replica = pick_replica(self.policy, self.loads, next(self._num_sent))
        self.loads[replica] += 1
        self.replica_of[uid] = replica
        return replica

    def finish(self, uids: list[int]) -> None:
        for uid in uids:
            replica = self.replica_of.pop(uid, None)
            if replica is not None:
                self.loads[replica] -= 1


def run_controller(addrs: IpcAddresses, num_replicas: int, policy: str, ready: Ready) -> None:
    """The DP controller's body: route each message from the run's `scheduler` address."""
    inbox = PullQueue(addrs.scheduler)
    replicas = [PushQueue(addrs.for_replica(i).scheduler) for i in range(num_replicas)]
    dispatcher = Dispatcher(policy, num_replicas)
    ready(policy)
    try:
        while True:
            message = inbox.get()
            if isinstance(message, GenerateRequest):
                replicas[dispatcher.assign(message.uid)].put(message)
            elif isinstance(message, AbortRequest):
                if message.uid in dispatcher.replica_of:  # else it finished already: nothing to stop
                    replicas[dispatcher.replica_of[message.uid]].put(message)
            elif isinstance(message, FinishedRequests):
                dispatcher.finish(message.uids)
            elif isinstance(message, ShutdownRequest):
                for replica in replicas:
                    replica.put(message)
                return
    finally:
        for replica in replicas:
            replica.close(linger_ms=1000)  # a shutdown on its way must still leave
        inbox.close()


def spawn_schedulers(
    group: ChildGroup, config: SchedulerConfig, addrs: IpcAddresses, node_rank: int = 0
) -> list[BaseProcess]:
    """Start every scheduler process of this node as children of `group`, without waiting for their
    acks: this node's ranks of the one TP group, or, with `config.dp_size` > 1, the controller and
    the replicas. Returns every process a shutdown must wait for."""
    if config.dp_size == 1:
        return spawn_ranks(group, config, addrs, node_rank)
    controller = group.spawn("minisgl-dp-controller", run_controller, addrs, config.dp_size, config.dp_policy)
    ranks = []
    for replica in range(config.dp_size):
        ranks += spawn_ranks(group, dataclasses.replace(config, dp_rank=replica), addrs.for_replica(replica))
    return [*ranks, controller]
