"""PyNCCL: our own NCCL communicator through ctypes, no torch.distributed in the data path
(chapter 03).

Why not torch's NCCL process group? It is a fine default, but owning the communicator shows what
NCCL actually needs: rank 0 asks NCCL for a 128-byte unique id, every rank receives it over the
gloo CPU group, and each calls `ncclCommInitRank(comm, world, id, rank)`. Collectives are then
plain C calls enqueued on the current CUDA stream, so a CUDA graph can capture them. Its
`all_reduce` and `all_gather` make it a plugin of the seam (`impl.py`) as it is.

The library is the `libnccl.so.2` torch already loaded (read from /proc/self/maps), else the one in
the nvidia-nccl pip package, else the system's. MINISGL_NCCL_LIBRARY overrides all three.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import sys

import torch
import torch.distributed as dist

from .impl import broadcast_bytes

NCCL_SUCCESS = 0
NCCL_SUM = 0
NCCL_DTYPES = {
    torch.int8: 0,
    torch.uint8: 1,
    torch.int32: 2,
    torch.int64: 4,
    torch.float16: 6,
    torch.float32: 7,
    torch.float64: 8,
    torch.bfloat16: 9,
}


class NcclUniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_byte * 128)]


def find_nccl_library() -> str:
    """Path (or soname) of the NCCL library to load; see the module docstring for the order."""
    override = os.environ.get("MINISGL_NCCL_LIBRARY")
    if override:
        return override
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                if "libnccl.so" in line:
                    return line.split()[-1]
    except OSError:
        pass
    for base in sys.path:
        found = sorted(glob.glob(os.path.join(base, "nvidia", "*", "lib", "libnccl.so*")))
        if found:
            return found[0]
    return ctypes.util.find_library("nccl") or "libnccl.so.2"


class NcclLibrary:
    """The handful of NCCL entry points we use, with their C signatures."""

    def __init__(self, path: str) -> None:
        try:
            self.lib = ctypes.CDLL(path)
        except OSError as error:
            raise RuntimeError(f"cannot load NCCL from {path!r} ({error}); set MINISGL_NCCL_LIBRARY") from None
        c = ctypes
        self._bind("ncclGetErrorString", c.c_char_p, [c.c_int])
        self._bind("ncclGetVersion", c.c_int, [c.POINTER(c.c_int)])
        self._bind("ncclGetUniqueId", c.c_int, [c.POINTER(NcclUniqueId)])
        self._bind("ncclCommInitRank", c.c_int, [c.POINTER(c.c_void_p), c.c_int, NcclUniqueId, c.c_int])
        self._bind("ncclCommDestroy", c.c_int, [c.c_void_p])
        # (sendbuff, recvbuff, count, datatype, op, comm, stream)
        self._bind("ncclAllReduce", c.c_int,
                   [c.c_void_p, c.c_void_p, c.c_size_t, c.c_int, c.c_int, c.c_void_p, c.c_void_p])
        # (sendbuff, recvbuff, sendcount, datatype, comm, stream)
        self._bind("ncclAllGather", c.c_int, [c.c_void_p, c.c_void_p, c.c_size_t, c.c_int, c.c_void_p, c.c_void_p])

    def _bind(self, name: str, restype: object, argtypes: list) -> None:
        fn = getattr(self.lib, name)
        fn.restype, fn.argtypes = restype, argtypes

    def check(self, result: int, what: str) -> None:
        if result != NCCL_SUCCESS:
            message = self.lib.ncclGetErrorString(result).decode()
            raise RuntimeError(f"{what} failed: NCCL error {result} ({message})")

    def version(self) -> str:
        code = ctypes.c_int()
        self.check(self.lib.ncclGetVersion(ctypes.byref(code)), "ncclGetVersion")
        major, rest = divmod(code.value, 10000)
        return f"{major}.{rest // 100}.{rest % 100}"


class PyNCCLCommunicator:
    """One NCCL communicator over the ranks of `cpu_group` (a gloo group), each on its own GPU."""

    def __init__(self, cpu_group: dist.ProcessGroup, device: torch.device, library: str | None = None) -> None:
        self.nccl = NcclLibrary(library or find_nccl_library())
        self.rank = dist.get_rank(cpu_group)
        self.world_size = dist.get_world_size(cpu_group)
        self.device = device
        unique_id = NcclUniqueId()
        if self.rank == 0:
            self.nccl.check(self.nccl.lib.ncclGetUniqueId(ctypes.byref(unique_id)), "ncclGetUniqueId")
        # the id travels as 128 bytes over gloo: rank 0's bytes land in every rank's struct
        id_bytes = broadcast_bytes(bytes(unique_id.internal), cpu_group)
        ctypes.memmove(ctypes.addressof(unique_id), id_bytes, ctypes.sizeof(NcclUniqueId))
        self.comm = ctypes.c_void_p()
        with torch.cuda.device(device):
            self.nccl.check(
                self.nccl.lib.ncclCommInitRank(ctypes.byref(self.comm), self.world_size, unique_id, self.rank),
                "ncclCommInitRank",
            )

    @staticmethod
    def _stream() -> ctypes.c_void_p:
        return ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)  # the capture stream under a graph

    def _dtype(self, x: torch.Tensor) -> int:
        if x.dtype not in NCCL_DTYPES:
            raise TypeError(f"PyNCCL has no mapping for {x.dtype}; use one of {sorted(map(str, NCCL_DTYPES))}")
        if not x.is_cuda or not x.is_contiguous():
            raise ValueError("PyNCCL needs a contiguous CUDA tensor")
        return NCCL_DTYPES[x.dtype]

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        """In-place sum over the ranks."""
        dtype = self._dtype(x)
        ptr = x.data_ptr()
        self.nccl.check(
            self.nccl.lib.ncclAllReduce(ptr, ptr, x.numel(), dtype, NCCL_SUM, self.comm, self._stream()),
            "ncclAllReduce",
        )
        return x

    def all_gather(self, x: torch.Tensor) -> torch.Tensor:
        """[n, ...] on every rank -> [world * n, ...], rank-major."""
        x = x.contiguous()
        dtype = self._dtype(x)
        out = torch.empty((self.world_size * x.shape[0], *x.shape[1:]), dtype=x.dtype, device=x.device)
        self.nccl.check(
            self.nccl.lib.ncclAllGather(x.data_ptr(), out.data_ptr(), x.numel(), dtype, self.comm, self._stream()),
            "ncclAllGather",
        )
        return out

    def close(self) -> None:
        if self.comm:
            torch.cuda.synchronize(self.device)  # no collective may still be in flight
            self.nccl.check(self.nccl.lib.ncclCommDestroy(self.comm), "ncclCommDestroy")
            self.comm = ctypes.c_void_p()
