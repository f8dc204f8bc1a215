"""minisgl's own CPU kernels, in C: the quantized matrix-vector products of quant_gemv.c and the
quantized matrix-matrix products of quant_gemm.c (quantized.py), the bf16 matmuls on AMX tiles of
amx_gemm.c (amx_tiles.py), and the fused elementwise and decode-attention work of fused.c (the CPU
side of chapter 10's fused kernels) (chapter 16 teaches them).
They are compiled on first use by this machine's C compiler for this very CPU (`-march=native`:
AVX2 where it has it) and called through ctypes.

The shared library is cached under the minisgl cache dir, keyed by the sources, the compiler and
the CPU's feature flags, so a cache shared by two machines never hands one the other's build. No
compiler, or a compiler that fails: `cpu_kernels()` returns None and says why once in the log; the
layers then run the torch reference (minisgl/layers/kernels.py, what these kernels are tested
against), and quantized weights PyTorch's int4 / int8 kernels: slower, the same model.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import torch

from minisgl.utils import minisgl_cache_dir

from .capture import record_call

SOURCES = [Path(__file__).with_name(name) for name in ("quant_gemv.c", "quant_gemm.c", "amx_gemm.c", "fused.c")]
COMPILE_FLAGS = ["-O3", "-march=native", "-fopenmp", "-shared", "-fPIC"]
BLOCK = 32  # weights per GGUF block (Q4_0, Q4_1, Q8_0): one scale each

logger = logging.getLogger(__name__)
_POINTER, _INT, _INT64, _FLOAT = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_float


class CpuKernels:
    """The compiled library, its entry points wrapped for torch tensors (fp32, on the CPU)."""

    def __init__(self, library: ctypes.CDLL) -> None:
        def entry(name: str, *argtypes: type, restype: type | None = None) -> Callable[..., int | None]:
            function = getattr(library, name)
            function.argtypes, function.restype = list(argtypes), restype

            def call(*args: object) -> int | None:
                result = function(*args)
                record_call(function, args)  # written down while a CPU graph is being captured (capture.py)
                return result

            return call

        self._q4_1 = entry("q4_1_gemv", *[_POINTER] * 5, *[_INT] * 4)
        self._q8_0 = entry("q8_0_gemv", *[_POINTER] * 4, *[_INT] * 4)
        self._q4_1_gemm = entry("q4_1_gemm", *[_POINTER] * 5, *[_INT] * 4)
        self._q8_0_gemm = entry("q8_0_gemm", *[_POINTER] * 4, *[_INT] * 4)
        self._rms_norm = entry("rms_norm", _POINTER, _INT64, _POINTER, _INT64, _POINTER, _FLOAT, _POINTER, _POINTER,
                               _INT, _INT, _INT)
        self._rope = entry("rope", _POINTER, _INT64, _INT, _POINTER, _INT64, _INT, _POINTER, _POINTER, _POINTER,
                           _POINTER, _INT, _INT, _INT)
        self._silu_and_mul = entry("silu_and_mul", _POINTER, _POINTER, _INT, _INT, _INT)
        self._embedding = entry("embedding", _POINTER, _INT64, _INT64, _POINTER, _POINTER, _INT, _INT, restype=_INT)
        self._q4_1_tile_gemm = entry("q4_1_tile_gemm", *[_POINTER] * 5, *[_INT] * 4)
        self._q8_0_tile_gemm = entry("q8_0_tile_gemm", *[_POINTER] * 4, *[_INT] * 4)
        self._bf16_tile_gemm = entry("bf16_tile_gemm", *[_POINTER] * 3, *[_INT] * 4)
        # the kernels `q4_1` / `q8_0` choose from, by name
        self._q4_1_kernels = {"gemv": self._q4_1, "gemm": self._q4_1_gemm, "tiles": self._q4_1_tile_gemm}
        self._q8_0_kernels = {"gemv": self._q8_0, "gemm": self._q8_0_gemm, "tiles": self._q8_0_tile_gemm}
        # whether this build has the AMX kernel and Linux let this process use the tiles (asked once, here)
        self.amx_bf16 = bool(library.amx_bf16_ready())
        self._argmax_rows = entry("argmax_rows", _POINTER, _INT64, _INT, _INT, _POINTER, _INT)
        self._decode_attention = entry("decode_attention", _POINTER, _POINTER, _INT64, _POINTER, _INT64,
                                       *[_POINTER] * 3, _INT, _POINTER, _INT64, _POINTER, _POINTER, *[_INT] * 4,
                                       _FLOAT, _INT)

    def q4_1(self, codes: torch.Tensor, scale: torch.Tensor, minimum: torch.Tensor, x: torch.Tensor,
             kernel: str = "gemv") -> torch.Tensor:
        """x [rows, in] fp32 @ W.T -> [rows, out] fp32, W given as Q4_1 blocks: codes [out, in / 2]
        uint8 (two per byte, as in GGUF), scale and minimum [out, in / 32] fp32. `kernel`: "gemv"
        (quant_gemv.c, a few rows), "gemm" (quant_gemm.c, more rows, fp32 products) or "tiles"
        (amx_gemm.c, more rows, bf16 products on AMX tiles; only where `amx_bf16`)."""
        self._check_tiles(kernel)
        x, y = _operands(x, codes.shape[0])
        self._q4_1_kernels[kernel](codes.data_ptr(), scale.data_ptr(), minimum.data_ptr(), x.data_ptr(),
                                   y.data_ptr(), x.shape[0], codes.shape[0], x.shape[1], torch.get_num_threads())
        return y

    def q8_0(self, codes: torch.Tensor, scale: torch.Tensor, x: torch.Tensor, kernel: str = "gemv") -> torch.Tensor:
        """x [rows, in] fp32 @ W.T -> [rows, out] fp32, W given as Q8_0 blocks: codes [out, in] int8,
        scale [out, in / 32] fp32; `kernel` as for q4_1."""
        self._check_tiles(kernel)
        x, y = _operands(x, codes.shape[0])
        self._q8_0_kernels[kernel](codes.data_ptr(), scale.data_ptr(), x.data_ptr(), y.data_ptr(),
                                   x.shape[0], codes.shape[0], x.shape[1], torch.get_num_threads())
        return y

    def bf16_tiles(self, tiles: torch.Tensor, x: torch.Tensor, out_features: int, in_features: int) -> torch.Tensor:
        """x [rows, in] fp32 @ W.T -> [rows, out] fp32, multiplied on AMX tiles in bf16 (only where
        `amx_bf16`): W [out, in] given as bf16 tiles [ceil(out / 16), ceil(in / 32), 16, 32],
        zero-padded (amx_tiles.py's layout)."""
        self._check_tiles("tiles")
        if x.shape[-1] != in_features:
            raise ValueError(f"x has {x.shape[-1]} inputs per row, the weight {in_features}")
        x, y = _operands(x, out_features)
        self._bf16_tile_gemm(tiles.data_ptr(), x.data_ptr(), y.data_ptr(), x.shape[0], out_features, in_features,
                             torch.get_num_threads())
        return y

    def _check_tiles(self, kernel: str) -> None:
        """The AMX entry points of a build without them abort the process: refuse in Python first."""
        if kernel == "tiles" and not self.amx_bf16:
            raise RuntimeError("this CPU (or this build of minisgl's kernels) has no AMX-BF16 tiles; "
                               "use kernel 'gemm', or oneDNN's bf16 matmuls (prepacked.py)")

    def argmax_rows(self, x: torch.Tensor) -> torch.Tensor:
        """x [rows, cols] fp32 -> [rows] int64: torch.argmax(x, dim=-1) (first index on a tie, NaN
        the largest), one C call over threads."""
        rows = _rows(x)
        out = torch.empty(rows.shape[0], dtype=torch.int64)
        self._argmax_rows(rows.data_ptr(), rows.stride(0), rows.shape[0], rows.shape[1], out.data_ptr(),
                          torch.get_num_threads())
        return out

    def embedding(self, ids: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
        """ids [tokens] int64 -> their rows of table [rows, d] fp32, as F.embedding (an id outside
        the table raises IndexError)."""
        ids = ids.to(torch.int64).contiguous()
        out = torch.empty(ids.shape[0], table.shape[1])
        refused = self._embedding(table.data_ptr(), table.stride(0), table.shape[0], ids.data_ptr(), out.data_ptr(),
                                  ids.shape[0], table.shape[1])
        if refused:
            raise IndexError(f"{refused} token id(s) outside the embedding table of {table.shape[0]} rows")
        return out

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float,
                 residual: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x [..., d] -> (x / sqrt(mean(x^2) + eps) * weight, None), or with a residual, the same of
        x + residual and that sum (the residual stream carried on). Outputs fresh, in x's shape."""
        rows = _rows(x)
        out = torch.empty(rows.shape)
        if residual is None:
            summed, residual_rows, residual_stride = None, None, 0
        else:
            summed = torch.empty(rows.shape)
            residual = _rows(residual)
            residual_rows, residual_stride = residual.data_ptr(), residual.stride(0)
        self._rms_norm(rows.data_ptr(), rows.stride(0), residual_rows, residual_stride, weight.data_ptr(), eps,
                       out.data_ptr(), None if summed is None else summed.data_ptr(), rows.shape[0], rows.shape[1],
                       torch.get_num_threads())
        if x.dim() != 2:  # back to x's shape (q / k norms: [tokens, heads, d])
            out, summed = out.view(x.shape), None if summed is None else summed.view(x.shape)
        return out, summed

    def rope(self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor,
             cos_sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotate-half RoPE: q [tokens, q_heads, d], k [tokens, kv_heads, d] (views into qkv are
        fine) -> fresh rotated copies; cos_sin [max_position, d] = [cos | sin] per position."""
        q, k = _heads(q), _heads(k)
        tokens, head_dim = q.shape[0], q.shape[2]
        q_out, k_out = torch.empty(q.shape), torch.empty(k.shape)
        self._rope(q.data_ptr(), q.stride(0), q.shape[1], k.data_ptr(), k.stride(0), k.shape[1],
                   positions.to(torch.int64).contiguous().data_ptr(), cos_sin.contiguous().data_ptr(),
                   q_out.data_ptr(), k_out.data_ptr(), tokens, head_dim, torch.get_num_threads())
        return q_out, k_out

    def silu_and_mul(self, gate_up: torch.Tensor) -> torch.Tensor:
        """[rows, 2 * h] -> [rows, h]: silu(gate) * up."""
        gate_up = gate_up.contiguous()
        half = gate_up.shape[-1] // 2
        out = torch.empty(*gate_up.shape[:-1], half)
        self._silu_and_mul(gate_up.data_ptr(), out.data_ptr(), gate_up.numel() // gate_up.shape[-1], half,
                           torch.get_num_threads())
        return out

    def decode_attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, new_slots: torch.Tensor,
                         k_cache: torch.Tensor, v_cache: torch.Tensor, slots: torch.Tensor, lengths: torch.Tensor,
                         scale: float) -> torch.Tensor:
        """One query per request. Stores the step's k, v [reqs, kv_heads, d] into cache slots
        `new_slots` [reqs], then attends: q [reqs, q_heads, d]; caches [cache_slots, kv_heads, d],
        fp32 or bf16 (stored rounded, read widened; the arithmetic is fp32), written in place;
        slots [reqs, >= max length] int64, the cache rows of request i's first lengths[i] tokens
        -> [reqs, q_heads, d] fp32."""
        if k_cache.dtype not in (torch.float32, torch.bfloat16) or v_cache.dtype != k_cache.dtype:
            raise ValueError(f"decode attention reads fp32 or bf16 caches, not {k_cache.dtype} / {v_cache.dtype}")
        q, k, v = q.contiguous(), _heads(k), _heads(v)
        out = torch.empty(q.shape)
        self._decode_attention(q.data_ptr(), k.data_ptr(), k.stride(0), v.data_ptr(), v.stride(0),
                               new_slots.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(),
                               int(k_cache.dtype == torch.bfloat16), slots.data_ptr(),
                               slots.stride(0), lengths.data_ptr(), out.data_ptr(), q.shape[0], q.shape[1],
                               k_cache.shape[1], q.shape[2], scale, torch.get_num_threads())
        return out


def _operands(x: torch.Tensor, out_features: int) -> tuple[torch.Tensor, torch.Tensor]:
    """x as contiguous fp32 rows (what the matmul kernels read) and an empty output [rows, out]."""
    if x.dim() != 2 or x.device.type != "cpu":
        raise ValueError(f"minisgl's CPU matmul kernels take [rows, in] CPU tensors, "
                         f"not {tuple(x.shape)} on {x.device}")
    return x.float().contiguous(), torch.empty(x.shape[0], out_features)


def _rows(x: torch.Tensor) -> torch.Tensor:
    """x as [rows, last dim] with contiguous rows (a view where x's layout allows, else a copy)."""
    rows = x if x.dim() == 2 else x.reshape(-1, x.shape[-1])
    return rows if rows.stride(-1) == 1 else rows.contiguous()


def _heads(x: torch.Tensor) -> torch.Tensor:
    """[tokens, heads, d] with each token's heads one dense run (a column slice of qkv is)."""
    return x if x.stride(2) == 1 and x.stride(1) == x.shape[2] else x.contiguous()


@functools.cache
def cpu_kernels() -> CpuKernels | None:
    """The kernels built for this CPU, or None (with the reason logged) when they cannot be built."""
    try:
        return CpuKernels(ctypes.CDLL(str(build_library())))
    except (OSError, RuntimeError) as error:
        logger.warning("minisgl's C kernels for the CPU are unavailable (%s); the layers run their torch code "
                       "and 4-bit weights PyTorch's slower int4 / int8 kernels", error)
        return None


def use_cpu_kernels(x: torch.Tensor) -> bool:
    """Whether x can take minisgl's C kernels: an fp32 CPU tensor, on a machine that could build them."""
    return x.device.type == "cpu" and x.dtype == torch.float32 and cpu_kernels() is not None


def build_library(compiler: str | None = None, extra_flags: tuple[str, ...] = ()) -> Path:
    """Compile the C sources (or reuse the cached build) and return the shared library's path.
    `extra_flags` go after the defaults (tests build the portable path with -mno-avx2)."""
    compiler = compiler or os.environ.get("CC", "cc")
    if shutil.which(compiler) is None:
        raise RuntimeError(f"no C compiler '{compiler}' on PATH (install gcc or clang, or set CC)")
    flags = COMPILE_FLAGS + list(extra_flags)
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True).stdout
    sources = [source.read_text() for source in SOURCES]
    key = hashlib.sha256("\n".join([*sources, version, " ".join(flags), cpu_flags()]).encode())
    target = minisgl_cache_dir() / "kernels" / f"minisgl-cpu-{key.hexdigest()[:16]}.so"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = target.with_suffix(f".{os.getpid()}.tmp")
    built = subprocess.run([compiler, *flags, "-o", str(scratch), *map(str, SOURCES), "-lm"],
                           capture_output=True, text=True)
    if built.returncode != 0:
        first_error = next((line for line in built.stderr.splitlines() if "error" in line), built.stderr.strip())
        raise RuntimeError(f"{compiler} could not build minisgl's C kernels: {first_error}")
    scratch.replace(target)  # atomic: ranks building at once each see a whole library
    return target


def cpu_flags() -> str:
    """The CPU's feature flags (Linux /proc/cpuinfo), or its architecture name elsewhere."""
    try:
        with open("/proc/cpuinfo") as f:
            return next((line for line in f if line.startswith(("flags", "Features"))), os.uname().machine)
    except OSError:
        return os.uname().machine
