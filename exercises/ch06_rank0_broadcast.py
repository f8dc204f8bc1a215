"""Chapter 06 (rank-0 broadcast): every rank must see the same new requests, in the same order.

Only rank 0 talks to the tokenizer. Each scheduler step, rank 0 takes what arrived and forwards it:
the *count* goes over the gloo CPU group as a collective, which every rank joins in the same step
(so none runs ahead), and the message *bytes* go over ZMQ PUB/SUB, which carries any size without
a second collective. The other ranks learn the count from the same collective and then read exactly
that many messages from their SUB socket. `io` is the engine's `minisgl.scheduler.io.ZmqIO`:
- io.tp_info: this rank's DistributedInfo (`.rank`, `.size`, `.is_primary`);
- io.cpu_group: the gloo process group;
- io.publisher.put_raw(payload: bytes): rank 0 only, publishes to every other rank;
- io.subscriber.get_raw() -> bytes: other ranks only, the next published payload (blocks).
"""

from __future__ import annotations

from minisgl.scheduler.io import ZmqIO


def receive_step(io: ZmqIO, pulled: list[bytes]) -> list[bytes]:
    """Task 06-rank0-broadcast/receive-step: one step's new messages, the same on every rank.

    pulled:  on rank 0, the payloads it just took from the tokenizer (possibly none); [] elsewhere
    returns  rank 0's `pulled`, in its order, on every rank (a list; `pulled` is left unchanged)

    Contract:
    - at tp = 1 (io.tp_info.size == 1) there is no one to tell: return the payloads, with no
      collective and no socket;
    - otherwise rank 0 broadcasts len(pulled) over io.cpu_group (never the default group) from the
      group's rank 0 - which need not be global rank 0 - even when the count is 0, then publishes
      each payload; every other rank takes part in the same broadcast and then receives exactly
      that many payloads. Exactly one broadcast per step, no other collective.
      `minisgl.distributed.broadcast_count(count, group)` is that broadcast; written by hand it is
      an int64 tensor of shape [1] and `torch.distributed.broadcast(..., group=io.cpu_group,
      group_src=0)` (or src=`dist.get_global_rank(io.cpu_group, 0)`).

    May use: torch, torch.distributed, minisgl.distributed.broadcast_count, and the four
    attributes of `io` listed above. Not ZmqIO's own methods (its `receive` is the engine's answer
    to this task).
    """
    raise NotImplementedError("06-rank0-broadcast/receive-step")
