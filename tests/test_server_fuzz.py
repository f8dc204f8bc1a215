"""An outside fuzzer against the live server: Schemathesis reads the server's own `/openapi.json`
(request bodies and error answers included) and sends what it generates from it, valid and not.
Every answer must be a 2xx or a 4xx, never a 5xx, and every process must still be up afterwards.

The test sends a bounded number of cases per endpoint (`MINISGL_FUZZ_EXAMPLES`, 25 here); `make
fuzz` runs more, with every phase of the tool, and prints the counts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from importlib.metadata import version
from pathlib import Path

import httpx
import pytest

from minisgl.testing.server import RunningServer

EXAMPLES = int(os.environ.get("MINISGL_FUZZ_EXAMPLES", "25"))  # cases per endpoint
PHASES = os.environ.get("MINISGL_FUZZ_PHASES", "examples,fuzzing")  # make fuzz adds coverage (boundary values)
RUN_LIMIT_S = 300 + 10 * EXAMPLES  # for the fuzzer; requests are capped at 39 tokens, most are refused

pytestmark = pytest.mark.timeout(RUN_LIMIT_S + 300)  # and the server's start-up


def test_a_schema_driven_fuzzer_gets_no_5xx(tiny_model_dir, tmp_path):
    # 40 one-token pages: every request is capped at 39 tokens, so a generated max_tokens costs little
    args = ["--model", str(tiny_model_dir("qwen2")), "--device", "cpu", "--dtype", "float32", "--num-pages", "40",
            "--log-level", "warning"]
    har = tmp_path / "fuzz.har"
    with RunningServer(args) as server:
        command = [str(Path(sys.executable).with_name("schemathesis")), "run", f"{server.base_url}/openapi.json",
                   "--max-examples", str(EXAMPLES), "--phases", PHASES, "--seed", "0", "--workers", "1",
                   "--checks", "not_a_server_error", "--generation-database", "none", "--request-timeout", "120",
                   "--report", "har", "--report-har-path", str(har), "--no-color"]
        result = subprocess.run(command, capture_output=True, text=True, timeout=RUN_LIMIT_S,
                                cwd=tmp_path)
        statuses = Counter(entry["response"]["status"] for entry in json.loads(har.read_text())["log"]["entries"])
        print(f"\nschemathesis {version('schemathesis')}: {sum(statuses.values())} requests, by status "
              f"{dict(sorted(statuses.items()))}, 5xx: {sum(n for s, n in statuses.items() if s >= 500)}")
        assert result.returncode == 0, result.stdout[-4000:]
        assert not [status for status in statuses if status >= 500]
        assert sum(statuses.values()) >= 3 * EXAMPLES  # the three POST endpoints were fuzzed
        assert httpx.get(f"{server.base_url}/health", timeout=30).status_code == 200  # every process is up
