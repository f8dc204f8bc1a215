"""Two "nodes" on one machine (two launches on loopback, gloo): they answer like one node, node 0
ends the run for both, and killing either side's launcher with SIGKILL stops the other with one
line naming it, leaving no process behind. Strangers on node 0's link port (silent, garbage, a node
of another run) are ignored while the real node joins; every bad --dist-init-addr is one line
quoting what was typed; the ranks of both nodes share the machine's cores."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import pytest

from minisgl import LLM, SamplingParams
from minisgl.distributed import DistributedInfo
from minisgl.config import EngineConfig
from minisgl.process.nodes import NODE_PORT_OFFSET, check_dist_init_addr
from minisgl.testing.server import RunningServer
from minisgl.utils import ephemeral_ports_start, free_port

from test_server_lifecycle import assert_all_gone, descendants, error_lines, run_cli, run_cli_cases

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

    def wait_serving(self, timeout_s: float = 240.0) -> None:
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


def _node_args(model_dir: Path, tp_size: int, node_rank: int, dist_init_port: int,
               scheme: str = "") -> list[str]:
    return ["--model", str(model_dir), "--device", "cpu", "--dtype", "float32", "--num-pages", "256",
            "--tp-size", str(tp_size), "--nnodes", "2", "--node-rank", str(node_rank),
            "--dist-init-addr", f"{scheme}127.0.0.1:{dist_init_port}"]


def _start_two_nodes(model_dir: Path, tp_size: int) -> tuple[RunningServer, WorkerNode]:
    port = free_port(1 + NODE_PORT_OFFSET)  # node 0 listens on the next NODE_PORT_OFFSET ports too
    worker = WorkerNode(_node_args(model_dir, tp_size, 1, port))  # may start first: it waits for node 0
    try:
        server = RunningServer(_node_args(model_dir, tp_size, 0, port))
        worker.wait_serving()
    except BaseException:
        worker.stop()
        raise
    return server, worker


def test_the_dist_init_port_and_the_next_two_are_free_and_outside_the_ephemeral_range() -> None:
    """An outgoing connection (gloo's, an HTTP client's) may take any port of the kernel's ephemeral
    range at any moment; a port + 1 picked there was once taken before node 0 bound it."""
    ephemeral_start = ephemeral_ports_start()
    for _ in range(20):
        first = free_port(1 + NODE_PORT_OFFSET)
        assert first + NODE_PORT_OFFSET < ephemeral_start
        with socket.create_server(("127.0.0.1", first)), socket.create_server(("127.0.0.1", first + 1)), \
                socket.create_server(("127.0.0.1", first + 2)):
            pass
    # a test that seeds `random` must not make two workers pick the same ports
    random.seed(0)
    first_picks = [free_port() for _ in range(5)]
    random.seed(0)
    assert [free_port() for _ in range(5)] != first_picks


def _generate(server: RunningServer, prompt: list[int]) -> list[int]:
    body = {"input_ids": prompt, "sampling_params": {"temperature": 0, "max_new_tokens": MAX_TOKENS,
                                                     "ignore_eos": True}}
    response = httpx.post(f"{server.base_url}/generate", json=body, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()["output_ids"]


@pytest.fixture(scope="module")
def expected(tiny_model_dir) -> list[list[int]]:
    """PROMPTS' greedy tokens from one process at tp = 1: what every two-node run must answer."""
    with LLM(tiny_model_dir("llama"), dtype="float32", num_pages=256, progress=False) as llm:
        greedy = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, ignore_eos=True)
        return [o.token_ids for o in llm.generate(PROMPTS, greedy)]


def _answer_like_one_then_end(server: RunningServer, worker: WorkerNode, expected: list[list[int]]) -> None:
    """The two nodes answer PROMPTS as one process does; node 0 ends the run, node 1 exits cleanly
    saying so, and no process of either is left."""
    children = descendants(server.process.pid) + descendants(worker.process.pid)
    assert [_generate(server, prompt) for prompt in PROMPTS] == expected
    assert server.stop() == 0
    assert worker.process.wait(timeout=120) == 0, worker.log()
    assert "node 0 ended the run" in worker.log()
    assert_all_gone(children)


def test_two_nodes_answer_like_one_and_node_0_ends_the_run(tiny_model_dir, expected) -> None:
    """tp = 4: two ranks per node (one per node: the strangers test below)."""
    server, worker = _start_two_nodes(tiny_model_dir("llama"), 4)
    try:
        _answer_like_one_then_end(server, worker, expected)
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
        assert survivor.wait(timeout=120) == 1
        log = server.log() if survivor is server.process else worker.log()
        errors = error_lines(log)
        assert len(errors) == 1 and f"{victim}" in errors[0] and "went away" in errors[0], log
        assert_all_gone(children)
    finally:
        server.stop()
        worker.stop()


BAD_NODE_FLAGS = [
    (["--nnodes", "2"], "needs --dist-init-addr"),
    (["--nnodes", "2", "--dist-init-addr", "127.0.0.1"], "not a host:port address"),
    (["--nnodes", "2", "--node-rank", "2", "--dist-init-addr", "127.0.0.1:29500"], "--node-rank must be in 0..1"),
    (["--nnodes", "2", "--tp-size", "3", "--dist-init-addr", "127.0.0.1:29500"], "does not split over --nnodes 2"),
    (["--nnodes", "2", "--dp-size", "2", "--tp-size", "2", "--dist-init-addr", "127.0.0.1:29500"], "one machine"),
    (["--dist-init-addr", "127.0.0.1:29500"], "add --nnodes"),
    (["--dp-size", "0"], "--dp-size must be at least 1"),
]


@pytest.fixture(scope="module")
def bad_node_flag_runs(tiny_model_dir) -> dict[str, subprocess.CompletedProcess]:
    argvs = [["--model", str(tiny_model_dir("llama")), "--device", "cpu", *args] for args, _ in BAD_NODE_FLAGS]
    return {" ".join(args): run for (args, _), run in zip(BAD_NODE_FLAGS, run_cli_cases(argvs))}


@pytest.mark.parametrize(("args", "message"), BAD_NODE_FLAGS)
def test_bad_node_flags_fail_fast_with_one_line(bad_node_flag_runs, args: list[str], message: str) -> None:
    result = bad_node_flag_runs[" ".join(args)]
    assert result.returncode == 2
    assert error_lines(result.stderr) == result.stderr.strip().splitlines()
    assert message in result.stderr


def _connect_when_listening(port: int, timeout_s: float) -> socket.socket:
    """A TCP connection to 127.0.0.1:`port`, as soon as something listens there."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
        except ConnectionRefusedError:
            assert time.monotonic() < deadline, f"nothing listened on {port}"
            time.sleep(0.05)


def test_strangers_on_the_link_port_are_ignored_while_the_node_joins(tiny_model_dir, expected) -> None:
    """tp = 2, one rank per node; once node 1 has joined, the run goes on as any other: it answers
    like one process and node 0 ends it."""
    model_dir = tiny_model_dir("llama")
    port = free_port(1 + NODE_PORT_OFFSET)  # node 0 listens on the next NODE_PORT_OFFSET ports too
    started: dict[str, object] = {}

    def start_node_0() -> None:  # RunningServer returns once healthy, i.e. once node 1 joined
        try:
            started["server"] = RunningServer(_node_args(model_dir, 2, 0, port, scheme="tcp://"))
        except BaseException as error:
            started["error"] = error

    node_0 = threading.Thread(target=start_node_0)
    node_0.start()
    strangers: list[socket.socket] = []
    worker = None
    try:
        # before node 1 exists: one connection says nothing, one speaks HTTP, one is a node of another run
        silent = _connect_when_listening(port + NODE_PORT_OFFSET, 120)
        strangers += [silent] + [socket.create_connection(("127.0.0.1", port + NODE_PORT_OFFSET)) for _ in range(2)]
        strangers[1].sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        strangers[2].sendall(b"minisgl-node 0123456789abcdef 1\n")
        strangers[2].settimeout(120)
        assert strangers[2].makefile("rb").readline().startswith(b"refused its launch settings differ")
        worker = WorkerNode(_node_args(model_dir, 2, 1, port))  # (host:port here, tcp://host:port on node 0)
        node_0.join(240)
        assert "error" not in started, (started.get("error"), worker.log())
        server = started["server"]
        assert isinstance(server, RunningServer)
        try:
            worker.wait_serving()
            log = server.log()
            assert "is not a minisgl node; ignored" in log and "was refused: its launch settings differ" in log
            _answer_like_one_then_end(server, worker, expected)
        finally:
            server.stop()
    finally:
        node_0.join(240)
        for stranger in strangers:
            stranger.close()
        if worker is not None:
            worker.stop()


@pytest.mark.parametrize(
    ("addr", "message"),
    [
        ("127.0.0.1:65534", "use a port in 1..65533"),  # node 0 also listens on port + 1 and port + 2
        ("127.0.0.1:65535", "use a port in 1..65533"),
        ("127.0.0.1:65536", "with a port in 1..65535"),
        ("127.0.0.1:0", "with a port in 1..65535"),
        ("127.0.0.1", "not a host:port address"),
        ("tcp://127.0.0.1", "not a host:port address"),
        ("http://127.0.0.1:29500", "not a host:port address"),
        ("127.0.0.1:29500/path", "not a host:port address"),
    ],
)
def test_every_bad_dist_init_addr_is_one_line_quoting_what_was_typed(addr: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        check_dist_init_addr(addr)
    assert message in str(info.value) and "\n" not in str(info.value)
    assert str(info.value).startswith(f"{addr!r} ") or f" of {addr!r} " in str(info.value)  # as typed, no prefix


def test_a_dist_init_addr_is_accepted_with_or_without_tcp() -> None:
    assert check_dist_init_addr("tcp://10.0.0.1:29500") == check_dist_init_addr("10.0.0.1:29500") == ("10.0.0.1", 29500)
    assert check_dist_init_addr("[::1]:29500") == ("::1", 29500)


def test_a_port_without_room_for_the_next_two_is_one_line_from_the_cli(tiny_model_dir) -> None:
    result = run_cli("--model", str(tiny_model_dir("llama")), "--device", "cpu", "--nnodes", "2", "--tp-size", "2",
                     "--dist-init-addr", "tcp://127.0.0.1:65535")
    assert result.returncode == 2
    assert error_lines(result.stderr) == result.stderr.strip().splitlines()  # one line, no traceback
    # the address as typed: its tcp:// is understood, and no second one is added
    assert "--dist-init-addr: the port of 'tcp://127.0.0.1:65535'" in result.stderr and "1..65533" in result.stderr


def test_the_ranks_of_nodes_on_one_machine_share_its_cores(monkeypatch) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)

    def threads(addr: str, nnodes: int = 2, tp_size: int = 4) -> int:
        return EngineConfig(Path("model"), tp_info=DistributedInfo(0, tp_size), nnodes=nnodes,
                            dist_init_addr=addr).rank_cpu_threads

    assert threads("127.0.0.1:29500") == 2  # loopback: both nodes are here, 4 ranks on 8 cores
    assert threads("tcp://localhost:29500") == 2
    assert threads("10.0.0.1:29500") == 4  # a network address: a machine per node, 2 ranks on its 8 cores
    assert threads("file:///tmp/store", nnodes=1) == 2  # one node: its 4 ranks
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)  # taskset -c 0,1
    assert threads("10.0.0.1:29500") == 1
