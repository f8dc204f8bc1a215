"""`python -m minisgl` command-line arguments -> `ServerArgs`, and the checks that must fail before
anything is spawned (chapter 02): the server's own here, every launch setting in
`minisgl.config.resolve_config`, the one place the CLI and `LLM(...)` share.

As in mini-SGLang, the parent's scheduler config carries `tp_info = DistributedInfo(0, tp_size)`;
the launcher replaces it by `DistributedInfo(rank, tp_size)` for each rank it spawns.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import socket
from dataclasses import dataclass
from pathlib import Path

from minisgl.attention.base import BACKENDS
from minisgl.config import DP_POLICIES, DTYPES, ArgsError, SchedulerConfig, resolve_config
from minisgl.distributed import DistributedInfo
from minisgl.distributed.groups import DIST_BACKENDS
from minisgl.kvcache import CACHES
from minisgl.models.config import MOE_PARALLEL

from .limits import DEFAULT_MAX_BODY_MB, DEFAULT_READ_TIMEOUT_S, check_http_limits

DEFAULT_PORT = 8000
API_KEY_ENV = "MINISGL_API_KEY"


@dataclass
class ServerArgs:
    scheduler: SchedulerConfig  # the engine and batching config every rank starts from
    served_model_name: str = ""  # the `model` clients name; default: the model directory's name
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    num_tokenizers: int = 1
    api_key: str | None = None
    max_pending_requests: int = 1024  # requests the API holds at once; beyond it, 503
    start_timeout_s: float = 300.0
    log_level: str = "info"
    shell: bool = False
    shell_max_tokens: int = 1024  # the longest reply the shell asks for
    node_rank: int = 0  # this machine's place in a multi-node run; node 0 serves HTTP (chapter 12)
    max_body_mb: float = DEFAULT_MAX_BODY_MB  # a larger HTTP body is a 413, unread (limits.py)
    read_timeout_s: float = DEFAULT_READ_TIMEOUT_S  # a slower header, or a longer pause in a body, closes


def build_parser() -> argparse.ArgumentParser:
    defaults = SchedulerConfig  # dataclass defaults: one source of truth for the engine's
    parser = argparse.ArgumentParser(
        prog="minisgl",
        description="Serve a model over an OpenAI-compatible HTTP API (or chat with it in a shell),\n"
        "with one scheduler process per tensor-parallel rank.",
        epilog="examples:\n"
        "  python -m minisgl                                 # embedded SmolLM2 on http://127.0.0.1:8000\n"
        "  python -m minisgl --tp-size 3 --dtype float32     # three CPU ranks, same answers\n"
        "  python -m minisgl --model ~/models/Qwen3-0.6B --device cuda\n"
        "  python -m minisgl --shell                         # chat in the terminal\n"
        "  python -m minisgl --tp-size 2 --nnodes 2 --node-rank 0 --dist-init-addr 10.0.0.1:29500   # on 10.0.0.1,\n"
        "  python -m minisgl --tp-size 2 --nnodes 2 --node-rank 1 --dist-init-addr 10.0.0.1:29500   # and on another",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    model = parser.add_argument_group("model")
    model.add_argument("--model", "--model-path", dest="model", metavar="DIR",
                       help="Hugging Face checkpoint directory (default: the embedded SmolLM2-135M-Instruct)")
    model.add_argument("--served-model-name", metavar="NAME",
                       help="the model name clients pass (default: the model directory's name)")
    model.add_argument("--load-format", default=defaults.load_format, choices=["safetensors", "dummy"],
                       help="dummy = random weights from config.json alone (benchmarks; the tokenizer is still read)")
    model.add_argument("--moe-parallel", default=defaults.moe_parallel, choices=list(MOE_PARALLEL),
                       help="a mixture-of-experts model's experts: tp = split each expert across the ranks (one "
                            "all-reduce), ep = whole experts per rank, tokens sent to them by all-to-all "
                            "(default: %(default)s)")
    model.add_argument("--dtype", default=defaults.dtype, choices=list(DTYPES),
                       help="weights and KV dtype; auto = bfloat16 on CUDA, on a CPU what a start-up probe "
                            "(cached per CPU) measures fastest")
    model.add_argument("--deterministic", action="store_true",
                       help="batch-invariant: a request's tokens never depend on the other requests in its batch "
                            "(CPU; fixed-shape matmul tiles, slower)")
    model.add_argument("--quantization", default=defaults.quantization, choices=["auto", "none", "gguf"],
                       help="gguf = 4-bit linear weights from the *.gguf file next to the checkpoint (CPU; the "
                            "embedded model has one); auto = gguf when --dtype is auto and the probe finds it faster")
    model.add_argument("--matmul-dtype", default=defaults.matmul_dtype, choices=["auto", "float32", "bfloat16"],
                       help="CPU, float32 activations: the dtype dense weights multiply in; bfloat16 = bf16 matmuls "
                            "(AMX / AVX512-BF16) with everything else fp32; auto = bfloat16 when --dtype is auto and "
                            "the probe finds it faster, else --dtype")

    parallel = parser.add_argument_group("processes and devices")
    parallel.add_argument("--tp-size", "--tensor-parallel-size", dest="tp_size", type=int, default=1, metavar="N",
                          help="tensor-parallel ranks, one scheduler process each (default: 1)")
    parallel.add_argument("--pp-size", "--pipeline-parallel-size", dest="pp_size", type=int, default=1, metavar="N",
                          help="pipeline stages, each holding a contiguous block of layers and its own tp ranks "
                               "(default: 1)")
    parallel.add_argument("--dp-size", "--data-parallel-size", dest="dp_size", type=int, default=1, metavar="N",
                          help="data-parallel replicas, each with its own tp ranks and KV cache (default: 1)")
    parallel.add_argument("--dp-policy", default=defaults.dp_policy, choices=list(DP_POLICIES),
                          help="which replica gets each request: round-robin, or the one with the fewest "
                               "waiting + running requests (default: round-robin)")
    parallel.add_argument("--nnodes", type=int, default=1, metavar="N",
                          help="machines the tp ranks span, tp-size / nnodes ranks each (default: 1)")
    parallel.add_argument("--node-rank", type=int, default=0, metavar="R",
                          help="this machine's place among them; node 0 serves HTTP (default: 0)")
    parallel.add_argument("--dist-init-addr", metavar="HOST:PORT",
                          help="with --nnodes > 1: where the ranks meet, an address of node 0; node 0 also uses "
                               "the next two ports (rank 0's broadcast, the links between nodes)")
    parallel.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"],
                          help="auto = cuda when torch sees a GPU, else cpu")
    parallel.add_argument("--dist-backend", default=defaults.dist_backend,
                          choices=list(DIST_BACKENDS),
                          help="tensor collectives; auto = pynccl with one GPU per rank, else gloo; symm = pynccl "
                               "with PyTorch's symmetric-memory one-shot all-reduce for messages up to 1 MiB")
    parallel.add_argument("--attention-backend", "--attn", dest="attention_backend",
                          default=defaults.attention_backend, choices=list(BACKENDS),
                          help="auto = triton on CUDA (when installed), torch elsewhere; flashinfer = "
                               "FlashInfer's kernels (optional flashinfer-python package, CUDA, bf16/fp16; "
                               "compiles its kernels on first use, tens of seconds)")
    parallel.add_argument("--cuda-graph-max-bs", type=int, default=None, metavar="N",
                          help="largest decode batch replayed as a CUDA graph; 0 disables graphs "
                               "(default: --max-running-requests, at most 256)")
    parallel.add_argument("--cpu-graph-max-bs", type=int, default=None, metavar="N",
                          help="largest decode batch replayed as a CPU graph of minisgl's C kernel calls (fp32 "
                               "with --quantization gguf, one rank); 0 disables (default: --max-running-requests, "
                               "or the quantized kernels' row limit where smaller)")
    parallel.add_argument("--disable-overlap-schedule", action="store_true",
                          help="on CUDA, wait for each step's tokens before scheduling the next")
    parallel.add_argument("--comm-stats-dir", metavar="DIR",
                          help="count bytes and time of every collective, per forward and per layer; each rank "
                               "writes comm-tp<rank>.json into DIR when it stops (decode runs without CUDA graphs)")
    parallel.add_argument("--trace", metavar="DIR",
                          help="record a timeline of every process (messages, batches, collectives, text, HTTP); "
                               "at exit DIR/trace.json holds them all, for https://ui.perfetto.dev")
    parallel.add_argument("--num-tokenizers", type=int, default=1, metavar="N",
                          help="tokenizer worker processes (default: 1)")

    batching = parser.add_argument_group("batching and KV cache")
    batching.add_argument("--max-running-requests", type=int, default=defaults.max_running_requests, metavar="N",
                          help="requests decoded together (default: 64 on a CPU; on CUDA from the KV pool, "
                          "256 on an H200)")
    batching.add_argument("--max-prefill-tokens", "--max-prefill-length", dest="max_prefill_tokens", type=int,
                          default=defaults.max_prefill_tokens, metavar="TOKENS",
                          help="prompt tokens per prefill step; longer prompts are chunked (default: 2048 on a "
                          "CPU; on CUDA from the KV pool, 8192 on an H200)")
    batching.add_argument("--page-size", type=int, default=defaults.page_size, metavar="TOKENS",
                          help=f"tokens per KV page (default: {defaults.page_size})")
    batching.add_argument("--cache", default=defaults.cache, choices=list(CACHES),
                          help="radix = requests reuse the KV pages of a cached prefix (multi-turn chat, a shared "
                               "system prompt or document); naive = every prompt is computed whole "
                               f"(default: {defaults.cache})")
    budget = batching.add_mutually_exclusive_group()
    budget.add_argument("--num-pages", type=int, metavar="N", help="KV cache size in pages")
    budget.add_argument("--kv-memory-gb", type=float, metavar="GB",
                        help="KV cache size in GiB per rank (default: sized from free memory)")
    batching.add_argument("--kv-cache-dtype", default=defaults.kv_cache_dtype, choices=["auto", "bfloat16"],
                          help="auto = --dtype; bfloat16 with float32 activations (CPU) stores keys and values in "
                               "bf16: twice the tokens in the same memory, each rounded once (default: auto)")
    batching.add_argument("--max-pending-requests", type=int, default=1024, metavar="N",
                          help="requests in flight before the API answers 503 (default: 1024)")

    server = parser.add_argument_group("server")
    server.add_argument("--host", default="127.0.0.1", help="bind address (default: 127.0.0.1, this machine only)")
    server.add_argument("--port", type=int, default=DEFAULT_PORT,
                        help=f"HTTP port (default: {DEFAULT_PORT}; 0 = any free)")
    server.add_argument("--api-key", metavar="KEY", default=os.environ.get(API_KEY_ENV) or None,
                        help="require 'Authorization: Bearer KEY' on /v1 and /generate, and turn /docs off "
                             f"(default: ${API_KEY_ENV}, which unlike this flag does not show in ps)")
    server.add_argument("--max-body-mb", type=float, default=DEFAULT_MAX_BODY_MB, metavar="MB",
                        help="largest HTTP request body in MiB; a larger one is answered 413 before it is read "
                             "(default: %(default)g)")
    server.add_argument("--read-timeout", type=float, default=DEFAULT_READ_TIMEOUT_S, metavar="SECONDS",
                        help="how long a client may take to send a request's header, or pause within its body, "
                             "before the connection is closed (default: %(default)g)")
    server.add_argument("--shell", action="store_true", help="chat in this terminal instead of serving HTTP")
    server.add_argument("--shell-max-tokens", type=int, default=1024, metavar="N",
                        help="with --shell: the most tokens one reply may have (default: %(default)s)")
    server.add_argument("--seed", type=int, default=defaults.seed,
                        help="base seed of requests that give none (default: %(default)s)")
    server.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    server.add_argument("--start-timeout", type=float, default=300.0, metavar="SECONDS",
                        help="how long every child process gets to report ready (default: 300)")
    return parser


def parse_args(argv: list[str] | None = None) -> ServerArgs:
    """Parse flags (argparse exits on unknown ones); the embedded model is converted here on first
    use. The checks that read the model or the machine come in `check_args`."""
    ns = build_parser().parse_args(argv)
    if ns.model is None:
        from minisgl.models.default_model import ensure_default_model

        model_path = ensure_default_model()
    else:
        model_path = Path(ns.model).expanduser()
    scheduler = SchedulerConfig(
        model_path=model_path,
        tp_info=DistributedInfo(0, ns.tp_size),
        pp_info=DistributedInfo(0, ns.pp_size),
        nnodes=ns.nnodes,
        dp_size=ns.dp_size,
        dp_policy=ns.dp_policy,
        device=ns.device,
        dtype=ns.dtype,
        quantization=ns.quantization,
        matmul_dtype=ns.matmul_dtype,
        kv_cache_dtype=ns.kv_cache_dtype,
        deterministic=ns.deterministic,
        page_size=ns.page_size,
        num_pages=ns.num_pages,
        kv_memory_gb=ns.kv_memory_gb,
        dist_backend=ns.dist_backend,
        attention_backend=ns.attention_backend,
        cuda_graph_max_bs=ns.cuda_graph_max_bs,
        cpu_graph_max_bs=ns.cpu_graph_max_bs,
        overlap_schedule=False if ns.disable_overlap_schedule else None,
        comm_stats_dir=ns.comm_stats_dir,
        trace_dir=ns.trace,
        dist_init_addr=ns.dist_init_addr or "",  # as typed (tcp:// or not): its errors quote it
        load_format=ns.load_format,
        moe_parallel=ns.moe_parallel,
        seed=ns.seed,
        max_running_requests=ns.max_running_requests,
        max_prefill_tokens=ns.max_prefill_tokens,
        cache=ns.cache,
    )
    return ServerArgs(
        scheduler=scheduler,
        served_model_name=ns.served_model_name or "",
        host=ns.host,
        port=ns.port,
        num_tokenizers=ns.num_tokenizers,
        api_key=ns.api_key,
        max_pending_requests=ns.max_pending_requests,
        start_timeout_s=ns.start_timeout,
        log_level=ns.log_level,
        shell=ns.shell,
        shell_max_tokens=ns.shell_max_tokens,
        node_rank=ns.node_rank,
        max_body_mb=ns.max_body_mb,
        read_timeout_s=ns.read_timeout,
    )


def check_args(args: ServerArgs) -> ServerArgs:
    """Every check that needs no child process; raises `ArgsError` (or `ModelError`) with one line.
    Returns `args` with the resolved launch settings (`resolve_config`) and `served_model_name`."""
    for flag, value in {"--num-tokenizers": args.num_tokenizers,
                        "--max-pending-requests": args.max_pending_requests,
                        "--shell-max-tokens": args.shell_max_tokens}.items():
        if value < 1:
            raise ArgsError(f"{flag} must be at least 1, got {value}")
    if not 0 <= args.port <= 65535:
        raise ArgsError(f"--port must be in 0..65535, got {args.port}")
    try:
        check_http_limits(args.max_body_mb, args.read_timeout_s)
    except ValueError as error:
        raise ArgsError(str(error)) from None
    nnodes = args.scheduler.nnodes
    if not 0 <= args.node_rank < max(nnodes, 1):
        raise ArgsError(f"--node-rank must be in 0..{nnodes - 1} for --nnodes {nnodes}, got {args.node_rank}")
    config = resolve_config(args.scheduler)
    name = args.served_model_name or config.model_path.resolve().name
    return dataclasses.replace(args, scheduler=config, served_model_name=name)


def check_and_bind(args: ServerArgs) -> tuple[ServerArgs, socket.socket | None]:
    """`check_args`, then the HTTP port bound (none for the shell or a node > 0): all a bad flag or a
    taken port can fail, done before the fork server starts and before the launcher imports its web
    stack, so that such a failure costs a second, not the start of a server."""
    args = check_args(args)
    return args, None if args.shell or args.node_rank > 0 else bind_http_socket(args.host, args.port)


def bind_http_socket(host: str, port: int) -> socket.socket:
    """Bind the HTTP port now, before any child starts, so a taken port fails in a second; uvicorn
    serves on this very socket later (no window for another process to take the port)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        raise ArgsError(f"cannot listen on {host}:{port} ({error.strerror}); pass another --port or --host") from None
    sock.listen(2048)
    sock.set_inheritable(False)
    return sock
