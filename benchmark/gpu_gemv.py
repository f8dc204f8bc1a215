"""Small-batch linear layers on a GPU: our Triton GEMV kernel (minisgl/kernel/triton/linear.py)
against cuBLAS (F.linear), for the linear layers of the SmolLM2-135M and Qwen3-0.6B shapes.

    python benchmark/gpu_gemv.py [--rows 1 2 4 8 16 32 64]

Like a decode step, each timing runs one layer's weight for every decoder layer of the model, so
the weights stream from HBM (their total is larger than the L2 cache) and the launch gaps are those
of a CUDA graph. Prints us per call for both and the ratio; the engine uses the GEMV kernel up to
minisgl.kernel.SMALL_BATCH_ROWS rows.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from minisgl.kernel.triton.linear import small_batch_linear
from minisgl.testing.shapes import SHAPES


def layer_linears(shape: dict) -> dict[str, tuple[int, int]]:
    """name -> (out features N, in features K) of one decoder layer's linear layers (tp = 1)."""
    hidden, head_dim = shape["hidden_size"], shape.get("head_dim", shape["hidden_size"] // shape["num_attention_heads"])
    heads, kv_heads, inter = shape["num_attention_heads"], shape["num_key_value_heads"], shape["intermediate_size"]
    return {
        "qkv_proj": ((heads + 2 * kv_heads) * head_dim, hidden),
        "o_proj": (hidden, heads * head_dim),
        "gate_up_proj": (2 * inter, hidden),
        "down_proj": (hidden, inter),
    }


def time_per_call(fn, weights: list[torch.Tensor], x: torch.Tensor, replays: int = 20) -> float:
    """us per call: one CUDA graph runs `fn` once per weight copy; median over replays."""
    for w in weights[:2]:
        fn(x, w)  # compile / pick algorithms outside the graph
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for w in weights:
            fn(x, w)
    times = []
    for _ in range(replays + 3):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / len(weights))
    return sorted(times[3:])[len(times[3:]) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", nargs="+", default=["smollm2-135m", "qwen3-0.6b"], choices=sorted(SHAPES))
    parser.add_argument("--rows", nargs="+", type=int, default=[1, 2, 4, 8, 16, 32, 64])
    args = parser.parse_args()
    torch.manual_seed(0)
    print(f"{'shape':<14}{'layer':<14}{'N x K':>12}{'rows':>6}{'cuBLAS us':>11}{'GEMV us':>9}{'cuBLAS/GEMV':>13}")
    for name in args.shapes:
        shape = SHAPES[name]
        for layer, (n, k) in layer_linears(shape).items():
            weights = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
                       for _ in range(shape["num_hidden_layers"])]
            for rows in args.rows:
                x = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16)
                cublas = time_per_call(lambda x, w: F.linear(x, w), weights, x)
                gemv = time_per_call(lambda x, w: small_batch_linear(x, w), weights, x)
                print(f"{name:<14}{layer:<14}{f'{n}x{k}':>12}{rows:>6}{cublas:>11.2f}{gemv:>9.2f}"
                      f"{cublas / gemv:>12.2f}x", flush=True)
            del weights


if __name__ == "__main__":
    main()
