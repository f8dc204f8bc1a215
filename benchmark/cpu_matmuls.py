"""Every matmul kernel minisgl has on this CPU, side by side on one decode step's linear layers: a
model shape's qkv, o, gate_up and down weights for every layer (SmolLM2's 30 layers by default,
random values), read from memory as in a real step, at several batch sizes. Per kernel and batch
size it prints ms per step, the weight bytes read per second and the GFLOP/s.

    python benchmark/cpu_matmuls.py                      # SmolLM2's shapes, rows 1 4 8 16 32 64
    python benchmark/cpu_matmuls.py --rows 1 32 --rounds 11 --shape qwen3-0.6b

Kernels, where this CPU and build have them: fp32 and bf16 weights in oneDNN's layout (what the
engine prepacks, prepacked.py), bf16 weights on minisgl's AMX tile kernel (amx_gemm.c), and the
GGUF's Q4_1 blocks on minisgl's matrix-vector kernel (quant_gemv.c), its fp32 matrix-matrix kernel
(quant_gemm.c) and its AMX tile kernel. It measures the way the kernel timings quoted in chapter 16
and in the C sources' comments were measured, so a learner can redo them on their own CPU.

Weights from memory: before each pass the script writes a buffer of twice the last-level cache, or
a large L3 (300 MB on some Xeons) would hold the weights of a small model and flatter the wide
formats. A shared machine drifts within minutes, so the kernels take turns in every round and the
medians of `--rounds` rounds are printed; compare kernels within one run, not across runs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable

import torch

from minisgl.cpu.amx_tiles import AmxTileWeight, amx_tiles_available
from minisgl.cpu.kernels import CpuKernels, cpu_kernels
from minisgl.cpu.precision import eviction_buffer, random_int4_weight, rank_linear_shapes
from minisgl.cpu.prepacked import PrepackedFloatWeight, bf16_prepacking_available, prepacking_available
from minisgl.cpu.quantized import BlockQ4Weight, PackedWeight
from minisgl.models.config import ModelConfig
from minisgl.testing.shapes import SHAPES

Matmul = Callable[[torch.Tensor], torch.Tensor]  # x [rows, in] fp32 -> [rows, out] fp32


def kernels_here(shapes: list[tuple[int, int]], generator: torch.Generator) -> dict[str, tuple[list[Matmul], int]]:
    """Kernel name -> (one matmul per weight, in `shapes` order; the bytes they read per pass), for
    the kernels this CPU and build run. The same random weights in every form."""
    dense = [torch.randn(shape, generator=generator) * 0.02 for shape in shapes]
    forms: dict[str, tuple[list[Matmul], int]] = {}

    def add(name: str, weights: list[PackedWeight]) -> None:
        forms[name] = ([w.matmul for w in weights], sum(w.kernel_bytes for w in weights))

    if prepacking_available():
        add("fp32, oneDNN", [PrepackedFloatWeight.from_dense(w, keep_dense=False) for w in dense])
    if bf16_prepacking_available():
        add("bf16, oneDNN", [PrepackedFloatWeight.from_dense(w, False, torch.bfloat16) for w in dense])
    if amx_tiles_available():
        add("bf16, AMX tiles", [AmxTileWeight.from_dense(w, keep_dense=False) for w in dense])
    kernels = cpu_kernels()
    if kernels is not None:
        q4 = [random_int4_weight(shape, generator) for shape in shapes]  # minisgl's Q4_1 blocks
        nbytes = sum(weight.kernel_bytes for weight in q4)
        for kernel in ("gemv", "gemm") + (("tiles",) if kernels.amx_bf16 else ()):
            forms[f"Q4_1, {kernel}"] = ([q4_1_matmul(kernels, weight, kernel) for weight in q4], nbytes)
    return forms


def q4_1_matmul(kernels: CpuKernels, weight: BlockQ4Weight, kernel: str) -> Matmul:
    """`weight`'s matmul on one of minisgl's Q4_1 kernels, whatever the batch size."""
    return lambda x: kernels.q4_1(weight.codes, weight.scale, weight.minimum, x, kernel=kernel)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", default="smollm2-135m", choices=sorted(SHAPES))
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 4, 8, 16, 32, 64])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    if min(args.rows) < 1 or args.rounds < 1 or args.threads < 1:
        sys.exit("error: --rows, --rounds and --threads take positive integers")
    torch.set_num_threads(args.threads)
    model = ModelConfig.from_dict(SHAPES[args.shape])
    shapes = rank_linear_shapes(model, tp_size=1) * model.num_layers
    print(f"{args.shape}: {model.num_layers} layers x {len(shapes) // model.num_layers} weights, {args.threads} "
          f"threads, medians of {args.rounds} rounds, weights from memory")
    forms = kernels_here(shapes, torch.Generator().manual_seed(0))
    weights = sum(out * inp for out, inp in shapes)
    evict = eviction_buffer()
    print(f"{'kernel':18s} {'rows':>4s} {'ms/step':>8s} {'GB/s':>7s} {'GFLOP/s':>8s}")
    for rows in args.rows:
        inputs = {inp: torch.randn(rows, inp) for _, inp in shapes}
        times: dict[str, list[float]] = {name: [] for name in forms}
        for matmuls, _ in forms.values():  # warm-up: first-call allocations, the kernels' build
            matmuls[0](inputs[shapes[0][1]])
        for _ in range(args.rounds):
            for name, (matmuls, _) in forms.items():
                evict.fill_(0.0)
                start = time.perf_counter()
                for matmul, (_, inp) in zip(matmuls, shapes):
                    matmul(inputs[inp])
                times[name].append(time.perf_counter() - start)
        for name, (_, nbytes) in forms.items():
            seconds = statistics.median(times[name])
            print(f"{name:18s} {rows:4d} {seconds * 1e3:8.1f} {nbytes / seconds / 1e9:7.1f} "
                  f"{2 * weights * rows / seconds / 1e9:8.1f}")


if __name__ == "__main__":
    main()
