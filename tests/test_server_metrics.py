"""`/metrics` on a real server (tiny Llama, tp = 2): Prometheus' own parser reads it, and the
numbers rank 0 sends match what two identical requests did: the second found all but the last
token of its prompt in the radix cache."""

from __future__ import annotations

import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from minisgl.testing.server import RunningServer

pytestmark = pytest.mark.timeout(300)


def _metrics(base_url: str) -> dict[str, float]:
    """name{labels} -> value, through Prometheus' parser (it rejects malformed text)."""
    response = httpx.get(f"{base_url}/metrics", timeout=10)
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    values = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            values[sample.name + (f"{{{labels}}}" if labels else "")] = sample.value
    return values


def test_metrics_count_requests_cache_hits_and_pages(tiny_model_dir) -> None:
    with RunningServer(["--model", str(tiny_model_dir("llama")), "--tp-size", "2", "--device", "cpu",
                        "--dtype", "float32", "--num-pages", "2000", "--api-key", "secret",
                        "--log-level", "warning"]) as server:
        body = {"text": " ".join(str(n) for n in range(100, 160)),
                "sampling_params": {"temperature": 0, "max_new_tokens": 6, "ignore_eos": True}}
        headers = {"Authorization": "Bearer secret"}
        answers = [httpx.post(f"{server.base_url}/generate", json=body, headers=headers, timeout=60).json()
                   for _ in range(2)]
        assert answers[0]["output_ids"] == answers[1]["output_ids"]
        prompt_len = answers[0]["usage"]["prompt_tokens"]
        deadline = time.monotonic() + 60
        while True:  # rank 0 reports about once a second
            metrics = _metrics(server.base_url)  # no API key needed, like /health
            if metrics.get("minisgl_generation_tokens_total") == 12 or time.monotonic() > deadline:
                break
            time.sleep(0.3)
    assert metrics["minisgl_requests_total"] == 2
    assert metrics['minisgl_requests_finished_total{reason="length"}'] == 2
    assert metrics["minisgl_requests_in_flight"] == 0
    assert metrics["minisgl_generation_tokens_total"] == 12  # counted once, by rank 0 only
    assert metrics["minisgl_prompt_tokens_total"] == 2 * prompt_len
    assert metrics["minisgl_prefix_cache_hit_tokens_total"] == prompt_len - 1
    assert metrics["minisgl_prefix_cache_hit_rate"] == pytest.approx((prompt_len - 1) / (2 * prompt_len))
    assert metrics["minisgl_num_requests_running"] == 0 and metrics["minisgl_num_requests_waiting"] == 0
    assert metrics['minisgl_kv_pages{state="in_use"}'] == 0
    # both conversations' tokens with K/V (prompt + 5 outputs) stay cached: one copy, they are equal
    assert metrics['minisgl_kv_pages{state="cached"}'] == prompt_len + 5
    assert metrics['minisgl_kv_pages{state="free"}'] == 1999 - prompt_len - 5
    assert metrics["minisgl_retractions_total"] == 0
