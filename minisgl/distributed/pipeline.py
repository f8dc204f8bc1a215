"""Point-to-point messages between pipeline stages (chapter 13): every one a rank sends or receives
across a stage boundary goes through the named functions here.

Rank r of a stage's TP group talks only to rank r of the neighbouring stages: it sends the
activations of each micro-batch to the next stage, and the last stage's rank r returns the sampled
tokens to the first stage's rank r. Each TP rank of a stage holds the full hidden states (they were
all-reduced), so every pair carries the whole tensor and no TP collective is needed at the border.

- Activations (`send_to_next_stage` / `recv_from_prev_stage`): one tensor per micro-batch and
  boundary, `[2, tokens, hidden]` = hidden states and residual stacked; on the tensor group (gloo on
  CPU, NCCL on GPUs). The receiver knows the shape: every stage schedules the same batches.
- Control (`send_step_to_next_stage`, `send_tokens_to_first_stage` and their receives): a few bytes
  (the messages of a step, the tokens of a micro-batch) over the gloo group, length first.

Sends return at once (`isend`); `wait_for_sends` waits for those still running when a rank stops.
The seam counts activation transfers (`p2p_counts`), not control bytes, as it counts the tensor
collectives and not the control-plane ones; with the communication counter on, it times them too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

import torch
import torch.distributed as dist

from .counter import COMM_COUNTER
from .impl import _COMM, DistributedInfo

_TAG_ACTIVATIONS, _TAG_STEP, _TAG_TOKENS = 1, 2, 3


@dataclass
class StageLinks:
    """This rank's neighbours (global ranks; None at the ends of the pipeline) and the groups it
    reaches them on."""

    prev: int | None
    next: int | None
    first: int
    last: int
    tensor_group: dist.ProcessGroup  # activations: gloo on CPU, NCCL on GPUs
    control_group: dist.ProcessGroup  # bytes: always gloo
    sends: list[tuple[dist.Work, torch.Tensor]] = field(default_factory=list)  # in flight, with their buffers


_LINKS: StageLinks | None = None


def link_stages(tp: DistributedInfo, pp: DistributedInfo, world: dist.ProcessGroup, device: torch.device,
                timeout: timedelta) -> None:
    """Link rank `tp.rank` of stage `pp.rank` to the same rank of its neighbouring stages, over the
    `world` group of every stage's ranks (`groups.join` calls it once)."""
    global _LINKS
    rank = pp.rank * tp.size + tp.rank
    _LINKS = StageLinks(
        prev=rank - tp.size if pp.rank > 0 else None,
        next=rank + tp.size if pp.rank < pp.size - 1 else None,
        first=tp.rank, last=(pp.size - 1) * tp.size + tp.rank,
        tensor_group=dist.new_group(backend="nccl", timeout=timeout) if device.type == "cuda" else world,
        control_group=world,
    )


def _links() -> StageLinks:
    if _LINKS is None:
        raise RuntimeError("this process is not a pipeline stage: run it with pp_size > 1")
    return _LINKS


def _isend(x: torch.Tensor, dst: int, group: dist.ProcessGroup, tag: int) -> None:
    links = _links()
    links.sends = [(w, t) for w, t in links.sends if not w.is_completed()]  # keep buffers alive until sent
    links.sends.append((dist.isend(x, dst, group=group, tag=tag), x))


def send_to_next_stage(x: torch.Tensor) -> None:
    """Hand this stage's output `x` [2, tokens, hidden] to the same TP rank of the next stage."""
    links = _links()
    _COMM.counts["send"] += 1
    x = x.contiguous()

    def send(t: torch.Tensor) -> torch.Tensor:
        _isend(t, links.next, links.tensor_group, _TAG_ACTIVATIONS)
        return t

    if COMM_COUNTER.enabled:
        COMM_COUNTER.run("send", x, send)
    else:
        send(x)


def recv_from_prev_stage(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """The previous stage's output for the micro-batch this stage runs next (it waits for it)."""
    links = _links()
    _COMM.counts["recv"] += 1
    buffer = torch.empty(shape, dtype=dtype, device=device)

    def recv(t: torch.Tensor) -> torch.Tensor:
        dist.recv(t, links.prev, group=links.tensor_group, tag=_TAG_ACTIVATIONS)
        return t

    return COMM_COUNTER.run("recv", buffer, recv) if COMM_COUNTER.enabled else recv(buffer)


def _send_bytes(data: bytes, dst: int, tag: int) -> None:
    links = _links()
    _isend(torch.tensor([len(data)], dtype=torch.int64), dst, links.control_group, tag)
    if data:  # no payload message for no bytes
        _isend(torch.frombuffer(bytearray(data), dtype=torch.uint8), dst, links.control_group, tag)


def _recv_bytes(src: int, tag: int) -> bytes:
    links = _links()
    length = torch.empty(1, dtype=torch.int64)
    dist.recv(length, src, group=links.control_group, tag=tag)
    if length.item() == 0:
        return b""
    payload = torch.empty(int(length.item()), dtype=torch.uint8)
    dist.recv(payload, src, group=links.control_group, tag=tag)
    return payload.numpy().tobytes()


def send_step_to_next_stage(data: bytes) -> None:
    """What this step's scheduler saw (messages, tokens), for the next stage to mirror."""
    _send_bytes(data, _links().next, _TAG_STEP)


def recv_step_from_prev_stage() -> bytes:
    return _recv_bytes(_links().prev, _TAG_STEP)


def send_tokens_to_first_stage(data: bytes) -> None:
    """The last stage's sampled tokens of one micro-batch, back to where the next step is scheduled."""
    _send_bytes(data, _links().first, _TAG_TOKENS)


def recv_tokens_from_last_stage() -> bytes:
    return _recv_bytes(_links().last, _TAG_TOKENS)


def wait_for_sends() -> None:
    """Wait until every send this rank started has been delivered (before it leaves the group)."""
    links = _links()
    for work, _ in links.sends:
        work.wait()
    links.sends.clear()


def p2p_counts() -> dict[str, int]:
    """How many activation sends and receives passed through the seam since `reset_collective_counts`."""
    return {"send": _COMM.counts["send"], "recv": _COMM.counts["recv"]}


def disable_pipeline() -> None:
    global _LINKS
    _LINKS = None
