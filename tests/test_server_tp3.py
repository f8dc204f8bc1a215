"""A server at tp = 3 on CPU: every process listens on the chosen host only (no TCP store on all
interfaces), the probes that used to kill every rank (a NaN or a 1e-45 temperature) do not, and
logit bias and penalties give the same tokens as the offline engine at tp = 1."""

from __future__ import annotations

import httpx
import openai
import psutil
import pytest

from minisgl import LLM, SamplingParams
from minisgl.testing.server import RunningServer

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def model_dir(tiny_model_dir):
    return tiny_model_dir("llama-tied")  # 6 heads, 3 KV heads: valid at tp 3


@pytest.fixture(scope="module")
def server(model_dir):
    with RunningServer(["--model", str(model_dir), "--tp-size", "3", "--device", "cpu", "--dtype", "float32",
                        "--log-level", "warning"]) as running:
        yield running


def listening_sockets(pid: int) -> list[tuple[str, str, int]]:
    """(process name, address, port) of every listening TCP socket of `pid` and its descendants."""
    found = []
    root = psutil.Process(pid)
    for process in [root, *root.children(recursive=True)]:
        for connection in process.net_connections(kind="inet"):
            if connection.status == psutil.CONN_LISTEN:
                found.append((process.name(), connection.laddr.ip, connection.laddr.port))
    return found


def test_every_listening_socket_is_on_the_chosen_host(server):
    sockets = listening_sockets(server.process.pid)
    assert ("127.0.0.1", server.port) in [(ip, port) for _, ip, port in sockets]  # the HTTP port
    assert len(sockets) > 1, sockets  # and gloo's, between the ranks
    assert {ip for _, ip, _ in sockets} == {"127.0.0.1"}, sockets


def test_bad_temperatures_do_not_stop_the_ranks(server):
    body = '{"prompt": "hi", "max_tokens": 2, "temperature": NaN}'
    response = httpx.post(f"{server.base_url}/v1/completions", content=body,
                          headers={"Content-Type": "application/json"}, timeout=60)
    assert response.status_code == 400 and response.json()["error"]["param"] == "temperature"
    client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0, timeout=60)

    def complete(temperature: float) -> str:
        return client.completions.create(model="llama-tied", prompt="The cache", max_tokens=8,
                                         temperature=temperature, extra_body={"ignore_eos": True}).choices[0].text

    assert complete(1e-45) == complete(0.0)
    assert httpx.get(f"{server.base_url}/health").json()["status"] == "ok"


def test_logit_bias_and_penalties_match_the_offline_engine_at_tp1(server, model_dir):
    params = {"temperature": 0.7, "seed": 5, "frequency_penalty": 1.5, "presence_penalty": -0.5,
              "logit_bias": {"40": 4.0, "41": -100.0}}
    prompt = [5, 6, 7, 8]
    body = {"input_ids": prompt, "sampling_params": {**params, "max_new_tokens": 24, "ignore_eos": True}}
    served = httpx.post(f"{server.base_url}/generate", json=body, timeout=60).json()["output_ids"]
    offline_params = SamplingParams(max_tokens=24, ignore_eos=True, **{**params, "logit_bias": {40: 4.0, 41: -100.0}})
    with LLM(model_dir, dtype="float32", num_pages=256, progress=False) as llm:
        assert served == llm.generate([prompt], offline_params)[0].token_ids
        plain = llm.generate([prompt], SamplingParams(temperature=0.7, seed=5, max_tokens=24, ignore_eos=True))
    assert served != plain[0].token_ids and 41 not in served
