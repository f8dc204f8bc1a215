"""benchmark/chapter_tables.py writes a benchmark's JSON record into a lesson's measured passages: the
same numbers, command and code spans in both languages (what tests/test_translations.py asks of a
translated page), and only inside the markers."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


tables = _load("chapter_tables", ROOT / "benchmark" / "chapter_tables.py")
tr = _load("translations", ROOT / "docs" / "translations.py")


def spread(median: float) -> dict:
    return {"median": median, "min": 0.9 * median, "max": 1.1 * median, "rounds": 4}


HEAD = {"command": "python benchmark/x.py --device cuda", "machine": "1x NVIDIA H200", "date": "2026-12-01",
        "commit": "abc1234", "torch": "2.13.0"}
PREFIX = {**HEAD, "results": {
    "workloads": {"conversations": 8, "turns": 4, "system_tokens": 200, "turn_tokens": 40, "questions": 32,
                  "doc_tokens": 2000, "max_tokens": 32},
    **{name: {"rounds": 4, "identical_rounds": 3, "ttft_ratio": spread(1.4), "throughput_ratio": spread(1.2),
              **{cache: {"ttft_mean_s": spread(0.025), "ttft_p50_s": spread(0.02), "total_s": spread(0.3),
                         "output_tok_per_s": spread(3427.0), "cached_share": spread(0.86 if cache == "radix" else 0)}
                 for cache in ("naive", "radix")}} for name in ("chat", "document")},
    "concurrency": {"requests": 64, "pages_on_demand": 64, "reserved_up_front": 26}}}
MOE = {**HEAD, "results": {
    "shape": "qwen3-30b-a3b", "layers": 16, "dtype": "bfloat16", "tp_size": 2, "requests": 128, "prompt_len": 128,
    "new_tokens": 32, "rounds": 3,
    **{split: {"step_ms_batch_1": spread(2.5), "step_ms_batch_64": spread(6.9), "output_tok_per_s": spread(9000.0),
               "decode_bytes_per_token": {"all_reduce": 135168.0, "all_gather": 8192.0,
                                          **({"all_to_all": 524383.0} if split == "ep" else {})},
               "comm_share": 0.07} for split in ("tp", "ep")}}}


def test_both_languages_get_the_same_numbers() -> None:
    for renderer, record in ((tables.prefix_cache, PREFIX), (tables.moe, MOE)):
        english, chinese = renderer(record, zh=False), renderer(record, zh=True)
        assert tr.differences(english, chinese) == [], renderer.__name__
        assert "abc1234" in english and "`python benchmark/x.py --device cuda`" in chinese
    english = tables.moe(MOE, zh=False)
    assert "bfloat16, tp 2;" in english and "9,000 (8,100–9,900) output tokens/s" in english


def test_only_the_marked_passage_changes_and_a_missing_file_leaves_it(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    page = "Before 13.6.\n\n<!-- measured: data/moe-gpu.json -->\nold 4,309\n<!-- /measured -->\n\nAfter.\n"
    assert tables.render(tmp_path, page, zh=False) == page  # no data file yet
    (tmp_path / "data" / "moe-gpu.json").write_text(__import__("json").dumps(MOE))
    written = tables.render(tmp_path, page, zh=False)
    assert written.startswith("Before 13.6.\n\n<!-- measured: data/moe-gpu.json -->\n")
    assert written.endswith("<!-- /measured -->\n\nAfter.\n") and "4,309" not in written and "9,000" in written
    assert tables.render(tmp_path, written, zh=False) == written  # running it again changes nothing
