"""The trace (`--trace DIR`, `LLM(trace=DIR)`): a traced tp = 2 run shows, for one request, the same
broadcast -> schedule -> forward -> collectives -> tokens sequence on every rank, in causal order
across ranks once `merge` has lined their clocks up; the merged file is valid Chrome trace JSON;
the recorder is bounded and records nothing when off; merge moves a machine whose clock breaks a
collective's causality, and leaves alone one that does not."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import matplotlib
import pytest

from minisgl import LLM, SamplingParams
from minisgl.trace import TRACE, Recorder, load, merge, plot, step_window
from minisgl.trace import recorder as recorder_module
from minisgl.testing.server import RunningServer
from minisgl.trace.chrome import clock_shifts

PROMPT = [5, 17, 99, 3, 8]
NEW_TOKENS = 3
SLACK_US = 5.0  # the two clock readings of an anchor, and microsecond rounding


def _by_process(trace: dict) -> dict[str, list[dict]]:
    names = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"}
    tracks: dict[str, list[dict]] = {name: [] for name in names.values()}
    for event in trace["traceEvents"]:
        if event["ph"] != "M":
            tracks[names[event["pid"]]].append(event)
    return {name: sorted(events, key=lambda e: e["ts"]) for name, events in tracks.items()}


def _request_story(events: list[dict], uid: int) -> list[tuple[str, object]]:
    """What a rank did for request `uid`, in its own time order: the message that brought it, then
    for each step of it (schedule, forward, the collectives inside the forward, tokens)."""
    story: list[tuple[str, object]] = []
    steps: set[int] = set()
    forwards = [e for e in events if e["name"] == "forward"]
    for e in events:
        if e["cat"] == "message" and f"GenerateRequest {uid}" in e["args"].get("messages", []):
            story.append(("message", e["name"]))
        elif e["name"] == "schedule" and uid in e["args"]["uids"]:
            steps.add(e["args"]["step"])
            story.append(("schedule", e["args"]["step"]))
        elif e["name"] == "forward" and e["args"]["step"] in steps:
            story.append(("forward", e["args"]["step"]))
        elif e["cat"] == "collective":
            inside = [f for f in forwards if f["ts"] <= e["ts"] and e["ts"] + e["dur"] <= f["ts"] + f["dur"]]
            assert len(inside) == 1, f"collective {e} outside a forward"
            if inside[0]["args"]["step"] in steps:
                story.append((e["name"], e["args"]["seq"]))
        elif e["name"] == "tokens" and uid in e["args"]["uids"]:
            story.append(("tokens", e["args"]["step"]))
    return story


@pytest.mark.timeout(300)
def test_a_traced_tp2_run_is_the_same_story_on_every_rank_in_causal_order(tiny_model_dir, tmp_path) -> None:
    params = SamplingParams(temperature=0, max_tokens=NEW_TOKENS, ignore_eos=True)
    with LLM(tiny_model_dir("llama"), tp_size=2, dtype="float32", num_pages=256, progress=False,
             trace=tmp_path) as llm:
        llm.generate([PROMPT], params)
    assert not TRACE.enabled  # shutdown stopped this process's recorder
    tracks = _by_process(load(tmp_path))
    assert list(tracks) == ["llm", "TP0-scheduler", "TP1-scheduler"]  # front-end first, then the ranks

    stories = [_request_story(tracks[f"TP{rank}-scheduler"], 0) for rank in (0, 1)]
    rank0, rank1 = stories
    assert rank0[0] == ("message", "broadcast") and rank1[0] == ("message", "receive")
    assert rank0[1:] == rank1[1:]  # the same steps, forwards and collectives, in the same order
    kinds = [kind for kind, _ in rank0[1:]]
    assert kinds.count("forward") == NEW_TOKENS and kinds.count("tokens") == NEW_TOKENS
    step = kinds[: kinds.index("tokens") + 1]
    assert step[:2] == ["schedule", "forward"] and step[-2:] == ["all_gather", "tokens"]
    assert set(step[2:-2]) == {"all_reduce"}

    # across ranks, on the merged clock: rank 1 learns the request after rank 0 starts sending it,
    # and nobody leaves a collective before everybody has entered it
    def first(events: list[dict], name: str) -> dict:
        return next(e for e in events if e["name"] == name and "GenerateRequest 0" in e["args"]["messages"])

    sent, received = first(tracks["TP0-scheduler"], "broadcast"), first(tracks["TP1-scheduler"], "receive")
    assert sent["ts"] <= received["ts"] + received["dur"] + SLACK_US
    collectives = [{(e["name"], e["args"]["seq"]): e for e in tracks[f"TP{r}-scheduler"] if e["cat"] == "collective"}
                   for r in (0, 1)]
    assert collectives[0].keys() == collectives[1].keys()
    for key, a in collectives[0].items():
        b = collectives[1][key]
        assert a["ts"] <= b["ts"] + b["dur"] + SLACK_US and b["ts"] <= a["ts"] + a["dur"] + SLACK_US, key
    request_in = next(e for e in tracks["llm"] if e["name"] == "request in")
    request_out = next(e for e in tracks["llm"] if e["name"] == "request out")
    assert request_in["ts"] <= sent["ts"] + sent["dur"] and request_out["ts"] >= rank0_tokens_end(tracks)


def rank0_tokens_end(tracks: dict[str, list[dict]]) -> float:
    return max(e["ts"] for e in tracks["TP0-scheduler"] if e["name"] == "send")


def test_the_merged_trace_is_valid_chrome_trace_json(tiny_model_dir, tmp_path) -> None:
    """In-process (tp = 1): the schema Perfetto and chrome://tracing read."""
    with LLM(tiny_model_dir("llama"), dtype="float32", num_pages=64, progress=False, trace=tmp_path) as llm:
        llm.generate([PROMPT], SamplingParams(temperature=0, max_tokens=2, ignore_eos=True))
    trace = json.loads((tmp_path / "trace.json").read_text())
    assert trace["displayTimeUnit"] == "ms"
    events = trace["traceEvents"]
    assert {e["ph"] for e in events} == {"M", "X", "i"}
    for event in events:
        assert isinstance(event["name"], str) and isinstance(event["pid"], int) and isinstance(event["tid"], int)
        if event["ph"] == "M":
            assert event["name"] in ("process_name", "process_sort_index", "thread_name") and "args" in event
            continue
        assert isinstance(event["ts"], (int, float)) and event["ts"] >= 0 and isinstance(event["cat"], str)
        assert isinstance(event["args"], dict)
        if event["ph"] == "X":
            assert isinstance(event["dur"], (int, float)) and event["dur"] >= 0
        else:
            assert event["s"] == "t"
    names = {e["name"] for e in events}
    assert {"load weights", "schedule", "forward", "tokens", "request in", "request out"} <= names


def test_overlap_launches_step_n_plus_1_before_reading_step_n(tiny_model_dir, tmp_path) -> None:
    """Chapter 10, on a CPU with overlap forced on: each decode step's forward starts before the
    tokens of the step before it are read."""
    with LLM(tiny_model_dir("llama"), dtype="float32", num_pages=64, progress=False, overlap_schedule=True,
             trace=tmp_path) as llm:
        llm.generate([PROMPT], SamplingParams(temperature=0, max_tokens=4, ignore_eos=True))
    events = _by_process(load(tmp_path))["llm"]
    forward_start = {e["args"]["step"]: e["ts"] for e in events if e["name"] == "forward"}
    tokens_read = {e["args"]["step"]: e["ts"] for e in events if e["name"] == "tokens"}
    assert sorted(forward_start) == [1, 2, 3, 4] and sorted(tokens_read) == [1, 2, 3, 4]
    for step in (1, 2, 3):
        assert forward_start[step + 1] < tokens_read[step]

    matplotlib.use("Agg")
    ax = plot(tmp_path, window=step_window(tmp_path, 2))
    assert [label.get_text() for label in ax.get_yticklabels()] == ["llm"]
    assert ax.get_xlim()[0] < forward_start[2] / 1000 < ax.get_xlim()[1]
    with pytest.raises(ValueError, match="steps run from 1 to 4"):
        step_window(tmp_path, 9)


def test_the_recorder_keeps_the_last_events_and_counts_the_dropped(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(recorder_module, "MAX_EVENTS", 3)
    recorder = Recorder()
    recorder.instant("before", "batch")  # off: nothing
    assert not recorder.events
    recorder.start(tmp_path, "minisgl-test")
    for i in range(5):
        recorder.instant("tick", "batch", i=i)
    with recorder.span("work", "batch"):
        pass
    assert [e.args.get("i") for e in recorder.events] == [3, 4, None] and recorder.recorded == 6
    path = recorder.save()
    assert path is not None and json.loads(path.read_text())["otherData"]["dropped"] == 3


def _fake_trace(process: str, host: str, anchor_offset_ns: int, collectives: list[tuple[float, float]]) -> dict:
    """A process whose wall clock reads `anchor_offset_ns` ahead, with all-reduces at (ts, dur)."""
    events = [{"ph": "X", "name": "all_reduce", "cat": "collective", "ts": ts, "dur": dur, "pid": 1, "tid": 0,
               "args": {"seq": seq, "device": "cpu"}} for seq, (ts, dur) in enumerate(collectives)]
    info = {"process": process, "host": host, "pid": 1, "anchor_wall_ns": 10**18 + anchor_offset_ns,
            "anchor_mono_ns": 5 * 10**9, "dropped": 0}
    return {"traceEvents": events, "otherData": info}


def test_merge_moves_only_a_machine_whose_clock_breaks_causality() -> None:
    rank0 = _fake_trace("minisgl-TP0-scheduler", "node0", 0, [(100.0, 10.0), (200.0, 10.0)])
    # node 1's clock is 1000 us behind: its all-reduces seem to end before rank 0's begin
    late = _fake_trace("minisgl-TP1-scheduler", "node1", 0, [(-900.0, 12.0), (-800.0, 12.0)])
    low, high = 100.0 - (-900.0 + 12.0), 110.0 - (-900.0)  # the first all-reduce bounds the shift
    low, high = max(low, 200.0 - (-788.0)), min(high, 210.0 - (-800.0))
    assert clock_shifts([rank0, late]) == [0.0, pytest.approx(low)]
    # a clock within the bounds is not moved; a second process on node 0 shares its monotonic clock
    fine = _fake_trace("minisgl-TP1-scheduler", "node1", 0, [(95.0, 12.0), (198.0, 12.0)])
    same_host = _fake_trace("minisgl-detokenizer", "node0", 7_000, [])
    same_host["otherData"]["anchor_mono_ns"] += 2_000  # started 2 us later by the monotonic clock
    assert clock_shifts([rank0, fine, same_host]) == [0.0, 0.0, pytest.approx(-5.0)]
    assert low <= high


def test_merge_says_what_to_do_with_an_empty_folder(tiny_model_dir, tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="run with --trace"):
        merge(tmp_path)
    recorder = Recorder()  # a launcher whose run failed before any process recorded anything
    recorder.start(tmp_path, "minisgl-server")
    assert recorder.finish() is None and not recorder.enabled
    (tmp_path / "trace.json").write_text("{}")  # a folder that already holds a trace: not for a new run
    with pytest.raises(ValueError, match="already holds a trace; pass an empty or new folder"):
        LLM(tiny_model_dir("llama"), trace=tmp_path)
    (tmp_path / "trace.json").unlink()
    result = subprocess.run([sys.executable, "-m", "minisgl.trace", "merge", str(tmp_path)], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 1 and result.stderr.count("\n") == 1 and "no trace-*.json" in result.stderr


@pytest.mark.timeout(300)
def test_a_traced_server_writes_every_process_at_sigterm(tiny_model_dir, tmp_path) -> None:
    """`--trace DIR`: the text processes are stopped by SIGTERM and still write their files; the
    server merges them all at exit, one track per process in the order data flows."""
    with RunningServer(["--model", str(tiny_model_dir("llama")), "--device", "cpu", "--dtype", "float32",
                        "--num-pages", "256", "--trace", str(tmp_path)]) as server:
        body = {"input_ids": PROMPT, "sampling_params": {"temperature": 0, "max_new_tokens": 2, "ignore_eos": True}}
        assert httpx.post(f"{server.base_url}/generate", json=body, timeout=60).status_code == 200
    assert server.process.returncode == 0, server.log()
    tracks = _by_process(load(tmp_path / "trace.json"))  # written by the server as it stopped
    assert list(tracks) == ["server", "tokenizer-0", "TP0-scheduler", "detokenizer"]
    first = {name: [e["name"] for e in events] for name, events in tracks.items()}
    assert first["server"] == ["request in", "request out"]
    assert first["tokenizer-0"] == ["start-up", "tokenize"]
    assert first["detokenizer"][0] == "start-up" and "detokenize" in first["detokenizer"]
