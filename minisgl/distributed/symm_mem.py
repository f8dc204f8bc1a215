"""A third GPU communicator behind the seam (chapter 13): PyTorch's symmetric-memory one-shot
all-reduce for small messages, the decode step's, with PyNCCL below it for everything else.

Each rank allocates one buffer with `torch.distributed._symmetric_memory.empty` and exchanges its
handle once (`rendezvous`), after which every rank can read every peer's buffer directly over
NVLink. An all-reduce of x then is: copy x into this rank's buffer, and one kernel that waits at a
barrier (signal pads) until every rank has copied, reads the world_size buffers and sums them into
x, and meets the others at a barrier again before anyone may write its buffer for the next call.
One kernel and no NCCL protocol: for a few KiB, latency is all there is. Larger messages, other
dtypes than bf16 / fp32, and all-gathers go to the plugin below (PyNCCL). Both kernels run on the
current stream, so CUDA graphs capture them.

NVLink multicast (NVLS) stays off: the machines this course runs on can be taken down by it. Joining
the group (`groups.join`) sets `TORCH_SYMM_MEM_DISABLE_MULTICAST=1` and `NCCL_NVLS_ENABLE=0` before
any communicator exists (`keep_multicast_off`), this module refuses to run without the first, checks after the
rendezvous that no multicast address was made, and never calls a `multimem_*` op.
"""

from __future__ import annotations

import logging
import os
import warnings

import torch
import torch.distributed as dist

from .impl import DistributedCommunicator, DistributedImpl

logger = logging.getLogger(__name__)

SYMM_MAX_BYTES = 1 << 20  # up to 1 MiB takes the one-shot kernel: a decode step of 128 tokens x 4096 in bf16
_DTYPES = (torch.bfloat16, torch.float32)  # what the kernels are built for


def keep_multicast_off() -> None:
    """Before any NCCL or symmetric-memory communicator exists: no NVLink multicast, unless the user
    decided otherwise for NCCL (the symmetric-memory path refuses to run with multicast on)."""
    os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")


def symm_mem_unavailable(device: torch.device) -> str | None:
    """Why the symmetric-memory all-reduce cannot run here, or None when it can."""
    if device.type != "cuda":
        return "it needs CUDA GPUs"
    if os.environ.get("TORCH_SYMM_MEM_DISABLE_MULTICAST") != "1":
        return "TORCH_SYMM_MEM_DISABLE_MULTICAST must be 1 (NVLink multicast stays off)"
    try:
        import torch.distributed._symmetric_memory  # noqa: F401
    except ImportError as error:
        return f"this torch has no symmetric memory ({error})"
    if not hasattr(torch.ops.symm_mem, "one_shot_all_reduce_out"):
        return f"torch {torch.__version__} has no symm_mem.one_shot_all_reduce_out"
    count = torch.cuda.device_count()
    for a in range(count):
        for b in range(count):
            if a != b and not torch.cuda.can_device_access_peer(a, b):
                return f"GPU {a} cannot read GPU {b}'s memory (no peer-to-peer path)"
    return None


class SymmMemDistributedImpl:
    """One-shot all-reduce through a symmetric buffer of `max_bytes` for messages that fit, the
    plugin below (`fallback`) for the rest."""

    def __init__(self, group: dist.ProcessGroup, device: torch.device, fallback: DistributedImpl,
                 max_bytes: int = SYMM_MAX_BYTES) -> None:
        import torch.distributed._symmetric_memory as symm_mem

        reason = symm_mem_unavailable(device)
        if reason is not None:
            raise RuntimeError(f"the symmetric-memory all-reduce cannot run: {reason}")
        self.fallback = fallback
        self.max_bytes = max_bytes
        self.group_name = group.group_name
        enable = getattr(symm_mem, "enable_symm_mem_for_group", None)
        if enable is not None and not hasattr(enable, "__deprecated__"):  # older torch: register the group first
            enable(self.group_name)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            # [max_bytes] raw bytes; each call views the prefix it needs in its dtype
            self.buffer = symm_mem.empty(max_bytes, dtype=torch.uint8, device=device)
            handle = symm_mem.rendezvous(self.buffer, self.group_name)  # a collective: every rank at once
        if getattr(handle, "multicast_ptr", 0):
            raise RuntimeError("the symmetric-memory rendezvous created an NVLink multicast object; "
                               "set TORCH_SYMM_MEM_DISABLE_MULTICAST=1 before starting")

    def fits(self, x: torch.Tensor) -> bool:
        nbytes = x.numel() * x.element_size()
        return x.dtype in _DTYPES and 0 < nbytes <= self.max_bytes and nbytes % 4 == 0  # the kernel's alignment

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        if not self.fits(x):
            return self.fallback.all_reduce(x)
        flat = x.view(-1)  # [n]; the seam hands in contiguous tensors
        staged = self.buffer[: flat.numel() * flat.element_size()].view(x.dtype)  # [n] in the symmetric buffer
        staged.copy_(flat)
        torch.ops.symm_mem.one_shot_all_reduce_out(staged, "sum", self.group_name, flat)  # the sum, into x
        return x

    def all_gather(self, x: torch.Tensor) -> torch.Tensor:
        return self.fallback.all_gather(x)


def enable_symm_mem(group: dist.ProcessGroup, device: torch.device) -> None:
    """Put the symmetric-memory all-reduce on top of the plugin list, over the plugin now on top
    (PyNCCL), which keeps large messages and all-gathers; where it cannot run, leave PyNCCL on top
    with a warning that says why."""
    plugins = DistributedCommunicator.plugins
    if not plugins:
        raise RuntimeError("enable_symm_mem needs a communicator below it (enable PyNCCL first)")
    reason = symm_mem_unavailable(device)
    if reason is not None:
        logger.warning("--dist-backend symm: %s; all-reduces stay on PyNCCL", reason)
        return
    plugins.append(SymmMemDistributedImpl(group, device, plugins[-1]))
