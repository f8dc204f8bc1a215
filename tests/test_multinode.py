"""Two "nodes" on one machine (two launches on loopback, gloo): they answer like one node, node 0
ends the run for both, and killing either side's launcher with SIGKILL stops the other with one
line naming it, leaving no process behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest

from minisgl import LLM, SamplingParams
from minisgl.testing.server import RunningServer
from minisgl.utils import free_port

from test_server_lifecycle import assert_all_gone, descendants, error_lines, run_cli

pytestmark = pytest.mark.timeout(300)

PROMPTS = [[5, 17, 99, 3], list(range(40, 71)), [7, 8, 9, 10, 11, 12]]
MAX_TOKENS = 10


class WorkerNode:
    """`python -m minisgl --node-rank 1 ...` in the background, its output in a temp file."""

    def __init__(self, args: list[str]) -> None:
        fd, name = tempfile.mkstemp(prefix="minisgl-node1-", suffix=".log")
        os.close(fd)
        self.log_path = Path(name)
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen([sys.executable, "-m", "minisgl", *args], stdout=log,
                                            stderr=subprocess.STDOUT)

    def wait_serving(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while "serving with node 0" not in self.log():
            assert self.process.poll() is None and time.monotonic() < deadline, self.log()
            time.sleep(0.2)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.log_path.unlink(missing_ok=True)


def _node_args(model_dir: Path, tp_size: int, node_rank: int, dist_init_port: int) -> list[str]:
    return ["--model", str(model_dir), "--device", "cpu", "--dtype", "float32", "--num-pages", "256",
            "--tp-size", str(tp_size), "--nnodes", "2", "--node-rank", str(node_rank),
            "--dist-init-addr", f"127.0.0.1:{dist_init_port}"]


def _start_two_nodes(model_dir: Path, tp_size: int) -> tuple[RunningServer, WorkerNode]:
    port = free_port()
    worker = WorkerNode(_node_args(model_dir, tp_size, 1, port))  # may start first: it waits for node 0
    try:
        server = RunningServer(_node_args(model_dir, tp_size, 0, port))
        worker.wait_serving()
    except BaseException:
        worker.stop()
        raise
    return server, worker


def _generate(server: RunningServer, prompt: list[int]) -> list[int]:
    body = {"input_ids": prompt, "sampling_params": {"temperature": 0, "max_new_tokens": MAX_TOKENS,
                                                     "ignore_eos": True}}
    response = httpx.post(f"{server.base_url}/generate", json=body, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()["output_ids"]


@pytest.mark.parametrize("tp_size", [2, 4])  # 1 and 2 ranks per node
def test_two_nodes_answer_like_one_and_node_0_ends_the_run(tiny_model_dir, tp_size: int) -> None:
    model_dir = tiny_model_dir("llama")
    with LLM(model_dir, dtype="float32", num_pages=256, progress=False) as llm:
        expected = [o.token_ids for o in llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=MAX_TOKENS,
                                                                              ignore_eos=True))]
    server, worker = _start_two_nodes(model_dir, tp_size)
    try:
        children = descendants(server.process.pid) + descendants(worker.process.pid)
        assert [_generate(server, prompt) for prompt in PROMPTS] == expected
        assert server.stop() == 0
        assert worker.process.wait(timeout=30) == 0, worker.log()
        assert "node 0 ended the run" in worker.log()
        assert_all_gone(children)
    finally:
        server.stop()
        worker.stop()


@pytest.mark.parametrize("victim", ["node 0", "node 1"])
def test_a_killed_node_stops_the_other_with_one_line(tiny_model_dir, victim: str) -> None:
    server, worker = _start_two_nodes(tiny_model_dir("llama"), 2)
    try:
        launchers = {"node 0": server.process, "node 1": worker.process}
        children = descendants(server.process.pid) + descendants(worker.process.pid)
        killed = launchers.pop(victim)
        (survivor,) = launchers.values()
        os.kill(killed.pid, signal.SIGKILL)
        assert survivor.wait(timeout=30) == 1
        log = server.log() if survivor is server.process else worker.log()
        errors = error_lines(log)
        assert len(errors) == 1 and f"{victim}" in errors[0] and "went away" in errors[0], log
        assert_all_gone(children)
    finally:
        server.stop()
        worker.stop()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--nnodes", "2"], "needs --dist-init-addr"),
        (["--nnodes", "2", "--dist-init-addr", "127.0.0.1"], "not a host:port address"),
        (["--nnodes", "2", "--node-rank", "2", "--dist-init-addr", "127.0.0.1:29500"], "--node-rank must be in 0..1"),
        (["--nnodes", "2", "--tp-size", "3", "--dist-init-addr", "127.0.0.1:29500"], "does not split over --nnodes 2"),
        (["--nnodes", "2", "--dp-size", "2", "--tp-size", "2", "--dist-init-addr", "127.0.0.1:29500"], "one machine"),
        (["--dist-init-addr", "127.0.0.1:29500"], "add --nnodes"),
        (["--dp-size", "0"], "--dp-size must be at least 1"),
    ],
)
def test_bad_node_flags_fail_fast_with_one_line(tiny_model_dir, args: list[str], message: str) -> None:
    result = run_cli("--model", str(tiny_model_dir("llama")), "--device", "cpu", *args, timeout=60)
    assert result.returncode == 2
    assert error_lines(result.stderr) == result.stderr.strip().splitlines()
    assert message in result.stderr
