"""The server's life: bad flags and failing children stop it with one line naming the cause;
SIGTERM stops it cleanly (open streams get an error event first); a rank killed with SIGKILL takes
the server down with a non-zero exit; no child process outlives it; the shell chats and exits."""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import httpx
import psutil
import pytest

from minisgl.testing.server import RunningServer
from minisgl.process.group import IPC_DIR_PREFIX, make_ipc_dir

pytestmark = pytest.mark.timeout(240)


def run_cli(*args: str, timeout: float = 120, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "minisgl", *args], capture_output=True, text=True,
                          timeout=timeout, input=stdin)


# Runs `python -m minisgl`'s main once per argv read from stdin, each in a fork of one interpreter
# that imported the launcher's modules once (torch among them: seconds of CPU a fresh `python -m
# minisgl` pays before it can refuse a flag). Prints one JSON result per argv.
_CLI_CASES = """
import json, os, signal, sys, tempfile
import minisgl.server.args
from minisgl.server.__main__ import main

for argv in json.loads(sys.stdin.read()):
    files = [tempfile.TemporaryFile(), tempfile.TemporaryFile()]  # the case's stdout and stderr
    pid = os.fork()
    if pid == 0:
        signal.alarm(120)  # a flag that is not refused would start a server: end it, failing
        os.dup2(files[0].fileno(), 1)
        os.dup2(files[1].fileno(), 2)
        code = 1
        try:
            code = main(argv)
        except SystemExit as exit:  # argparse's refusals
            code = exit.code if isinstance(exit.code, int) else 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    texts = []
    for file in files:
        file.seek(0)
        texts.append(file.read().decode(errors="replace"))
        file.close()
    print(json.dumps({"returncode": code, "stdout": texts[0], "stderr": texts[1]}), flush=True)
"""


def run_cli_cases(argvs: list[list[str]], timeout: float = 300) -> list[subprocess.CompletedProcess]:
    """`run_cli(*argv)` for each argv, but in forks of one process that imported the CLI once: for
    flags the CLI refuses before it starts anything (test_port_in_use_fails_fast and the multinode
    port test still run the real `python -m minisgl`, import-time output included)."""
    done = subprocess.run([sys.executable, "-c", _CLI_CASES], input=json.dumps(argvs), capture_output=True,
                          text=True, timeout=timeout)
    results = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(results) == len(argvs), f"the case runner stopped (exit {done.returncode}):\n{done.stderr[-3000:]}"
    return [subprocess.CompletedProcess(["minisgl", *argv], r["returncode"], r["stdout"], r["stderr"])
            for argv, r in zip(argvs, results)]


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("minisgl: error:")]


def tiny_server_args(tiny_model_dir, *extra: str) -> list[str]:
    return ["--model", str(tiny_model_dir("llama")), "--device", "cpu", "--dtype", "float32", *extra]


def descendants(pid: int) -> list[psutil.Process]:
    return psutil.Process(pid).children(recursive=True)


def assert_all_gone(processes: list[psutil.Process], timeout_s: float = 60.0) -> None:
    """Every process has exited (a zombie waiting for a reaper counts as gone: it runs nothing)."""
    deadline = time.monotonic() + timeout_s
    for process in processes:
        while True:
            try:
                if not process.is_running() or process.status() == psutil.STATUS_ZOMBIE:
                    break
            except psutil.NoSuchProcess:
                break
            assert time.monotonic() < deadline, f"pid {process.pid} still runs: {process.cmdline()}"
            time.sleep(0.1)


BAD_FLAGS = [
    (["--model", "/no/such/model"], "does not exist"),
    (["--tp-size", "2"], "valid tp sizes: 1, 3"),  # the embedded SmolLM2 has 9 heads
    (["--num-tokenizers", "0"], "--num-tokenizers must be at least 1"),
    (["--dist-backend", "nccl", "--device", "cpu"], "needs one GPU per rank"),
    (["--cuda-graph-max-bs", "-1"], "--cuda-graph-max-bs must be >= 0"),
    (["--attn", "flashinfer"], "attention backend 'flashinfer' runs on CUDA only"),
    (["--quantization", "gguf", "--load-format", "dummy"], "--load-format dummy has no GGUF to quantize from"),
    (["--matmul-dtype", "bfloat16", "--deterministic"], "use it with dtype float32, without --deterministic"),
    (["--shell-max-tokens", "0"], "--shell-max-tokens must be at least 1"),
]


@pytest.fixture(scope="module")
def bad_flag_runs(default_model_dir) -> dict[str, subprocess.CompletedProcess]:
    """Each case's run, by its flags. The embedded model is converted first (the default_model_dir
    fixture): a first conversion would print its progress, and these flags are not about it."""
    argvs = [[*args, "--device", "cpu", "--dtype", "float32"] for args, _ in BAD_FLAGS]
    return {" ".join(args): run for (args, _), run in zip(BAD_FLAGS, run_cli_cases(argvs))}


@pytest.mark.parametrize(("args", "message"), BAD_FLAGS)
def test_bad_flags_fail_fast_with_one_line(bad_flag_runs, args, message):
    result = bad_flag_runs[" ".join(args)]
    assert result.returncode == 2
    assert error_lines(result.stderr) == result.stderr.strip().splitlines()  # nothing else printed
    assert len(error_lines(result.stderr)) == 1 and message in result.stderr


def test_port_in_use_fails_fast(tiny_model_dir):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_cli("--model", str(tiny_model_dir("llama")), "--port", str(port))
    assert result.returncode == 2
    assert len(error_lines(result.stderr)) == 1 and f"127.0.0.1:{port}" in result.stderr


def test_child_failing_at_start_is_named(tiny_model_dir, tmp_path):
    broken = tmp_path / "no-weights"
    shutil.copytree(tiny_model_dir("llama"), broken, ignore=shutil.ignore_patterns("*.safetensors*"))
    process = subprocess.Popen([sys.executable, "-m", "minisgl", "--model", str(broken), "--tp-size", "2",
                                "--device", "cpu", "--dtype", "float32", "--port", "0", "--log-level", "warning"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    children: list[psutil.Process] = []
    while process.poll() is None:  # collect the children while they exist
        try:
            children = descendants(process.pid) or children
        except psutil.NoSuchProcess:
            break
        time.sleep(0.05)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 1
    assert len(error_lines(stderr)) == 1
    assert "failed to start" in stderr and "safetensors" in stderr
    assert children, "the server should have spawned children before failing"
    assert_all_gone(children)


def read_stream(server: RunningServer, events: list[str], started: threading.Event) -> None:
    """A long stream, read to its end: every `data:` line goes into `events`."""
    body = {"prompt": "Go on", "max_tokens": 480, "temperature": 0, "ignore_eos": True, "stream": True}
    with httpx.stream("POST", f"{server.base_url}/v1/completions", json=body, timeout=60) as response:
        for line in response.iter_lines():  # a connection cut without an end would raise here
            if line.startswith("data: "):
                events.append(line[len("data: "):])
                started.set()
    events.append("<closed>")


def test_sigterm_stops_everything_and_tells_open_streams(tiny_model_dir):
    server = RunningServer(tiny_server_args(tiny_model_dir, "--tp-size", "2"))
    children = descendants(server.process.pid)
    assert len(children) >= 4  # 2 ranks, a tokenizer, the detokenizer (and multiprocessing's tracker)
    streams = [([], threading.Event()) for _ in range(2)]
    readers = [threading.Thread(target=read_stream, args=(server, *stream)) for stream in streams]
    for reader in readers:
        reader.start()
    assert all(started.wait(60) for _, started in streams)
    assert server.stop(timeout_s=60) == 0  # 0: it stopped by itself, before the SIGKILL that ends the wait
    for reader in readers:
        reader.join(60)
    for events, _ in streams:
        # the last event says why the stream ends, then the connection closes cleanly
        assert events[-1] == "<closed>", events[-3:]
        assert "shutting down" in json.loads(events[-2])["error"]["message"], events[-3:]
    assert_all_gone(children)
    assert "stopped" in server.log()


def test_killed_rank_takes_the_server_down(tiny_model_dir):
    server = RunningServer(tiny_server_args(tiny_model_dir, "--tp-size", "2"))
    try:
        children = descendants(server.process.pid)
        victim = server.child_pid("minisgl-TP1-scheduler")
        os.kill(victim, signal.SIGKILL)
        server.process.wait(timeout=120)
    finally:
        server.stop()
    assert server.process.returncode not in (0, None)
    errors = error_lines(server.log())
    assert len(errors) == 1 and "minisgl-TP1-scheduler" in errors[0] and "SIGKILL" in errors[0]
    assert_all_gone(children)


def test_after_a_rank_is_killed_mid_request_the_survivor_names_it(tiny_model_dir):
    server = RunningServer(tiny_server_args(tiny_model_dir, "--tp-size", "2"))
    try:
        victim = server.child_pid("minisgl-TP1-scheduler")
        body = {"prompt": "A long answer", "max_tokens": 400, "ignore_eos": True, "temperature": 0, "stream": True}
        with httpx.stream("POST", f"{server.base_url}/v1/completions", json=body, timeout=60) as response:
            for line in response.iter_lines():
                if line.startswith("data: {"):  # tokens flow: every step runs collectives on both ranks
                    os.kill(victim, signal.SIGKILL)
                    break
        server.process.wait(timeout=120)
    finally:
        server.stop()
    survivor = [line for line in server.log().splitlines() if line.startswith("[minisgl-TP0-scheduler] stopped")]
    assert len(survivor) == 1, server.log()
    assert f"peer rank 1 (minisgl-TP1-scheduler, pid {victim} " in survivor[0] and "died" in survivor[0]
    assert "request" not in survivor[0]  # the step's requests did nothing wrong


def test_children_exit_when_the_server_is_killed(tiny_model_dir, monkeypatch):
    # a temp root of its own: a server started by a test in another worker would remove
    # this server's leftover folder before we look (that is the clean-up under test)
    private_tmp = tempfile.mkdtemp(prefix="ms-", dir="/tmp")  # short: ipc:// paths are length-limited
    monkeypatch.setenv("TMPDIR", private_tmp)
    monkeypatch.setattr(tempfile, "tempdir", private_tmp)
    server = RunningServer(tiny_server_args(tiny_model_dir))
    children = descendants(server.process.pid)
    server.process.kill()  # SIGKILL: no cleanup code runs; each child's launcher watchdog must notice
    server.stop()
    assert_all_gone(children)
    # its ipc socket folders stay behind; the next start removes them
    left = glob.glob(os.path.join(tempfile.gettempdir(), f"{IPC_DIR_PREFIX}{server.process.pid}-*"))
    assert len(left) == 1  # one folder for all of the server's sockets
    shutil.rmtree(make_ipc_dir())
    assert not any(os.path.exists(path) for path in left)
    # nothing else stayed but multiprocessing's own temp folder of the fork server's socket (its
    # atexit, which the kill skipped, removes it; Python's own leftover, not minisgl's)
    assert all(name.startswith("pymp-") for name in os.listdir(private_tmp)), os.listdir(private_tmp)
    shutil.rmtree(private_tmp)


def test_ipc_folders_of_live_processes_are_kept():
    mine = make_ipc_dir()
    try:
        assert os.path.basename(mine).startswith(f"{IPC_DIR_PREFIX}{os.getpid()}-")
        shutil.rmtree(make_ipc_dir())
        assert os.path.isdir(mine)  # this process is alive: its folder stays
    finally:
        shutil.rmtree(mine)


def test_shell_chats_resets_and_exits(tiny_model_dir):
    script = "What is the capital of France?\n/reset\n/nonsense\n/exit\n"
    # a random tiny model never samples its end token: the reply stops at --shell-max-tokens
    result = run_cli("--model", str(tiny_model_dir("llama")), "--shell", "--shell-max-tokens", "8", "--device", "cpu",
                     "--dtype", "float32", "--log-level", "warning", stdin=script)
    assert result.returncode == 0, result.stderr
    assert "minisgl shell" in result.stdout
    assert "(conversation cleared)" in result.stdout and "unknown command /nonsense" in result.stdout
    assert result.stdout.count(">>> ") == 4  # the question, /reset, /nonsense, /exit
