"""Write the measured numbers of chapters 11 and 14 from their data files into both languages.

A lesson marks each measured passage with `<!-- measured: data/NAME.json -->` ... `<!-- /measured -->`;
this script renders the passage from that JSON (what `benchmark/prefix_cache.py --out` or
`benchmark/moe.py --out` wrote: results, command, machine, date, commit) into README.md and
README.zh.md, and, where the Chinese page was up to date before, records the English page's new hash
in it (docs/translations.py). A marked passage whose data file is missing is left as it is.

    python benchmark/chapter_tables.py          # after copying the benchmark's JSON into chapters/NN-*/data/
"""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"(<!-- measured: (data/[\w.-]+\.json) -->\n)(.*?)(<!-- /measured -->)", re.S)


def _translations():
    spec = importlib.util.spec_from_file_location("translations", ROOT / "docs" / "translations.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _range(s: dict, fmt: str, scale: float = 1.0) -> str:
    """`median (smallest–largest)` of a spread."""
    return f"{s['median'] * scale:{fmt}} ({s['min'] * scale:{fmt}}–{s['max'] * scale:{fmt}})"


def _source(record: dict, zh: bool) -> str:
    return (f"{record['machine']}，{record['date']}，commit {record['commit']}，`{record['command']}`" if zh
            else f"{record['machine']}, {record['date']}, commit {record['commit']}, `{record['command']}`")


def prefix_cache(record: dict, zh: bool) -> str:
    """Chapter 11: the chat and document table, the per-round ratios, the concurrency counts."""
    r = record["results"]
    chat, doc = r["chat"], r["document"]
    w = r["workloads"]
    rows = [
        f"multi-turn chat, {w['conversations']} conversations × {w['turns']} turns, "
        f"{w['system_tokens']}-token system prompt",
        f"{w['questions']} questions over one {w['doc_tokens']:,}-token document, sent at once",
    ]
    lines = ["| workload | cache | TTFT mean | total | output tok/s | prompt tokens from the cache |",
             "| --- | --- | --- | --- | --- | --- |"]
    for label, table in zip(rows, (chat, doc)):
        for cache in ("naive", "radix"):
            m = table[cache]
            lines.append(f"| {label if cache == 'naive' else ''} | {cache} | {_range(m['ttft_mean_s'], '.3f')} s "
                         f"| {_range(m['total_s'], '.2f')} s | {_range(m['output_tok_per_s'], ',.0f')} "
                         f"| {m['cached_share']['median']:.0%} |".replace("%", " %"))
    n = chat["rounds"]
    ct, cs, dt, ds = chat["ttft_ratio"], chat["throughput_ratio"], doc["ttft_ratio"], doc["throughput_ratio"]
    conc = r.get("concurrency")
    if zh:
        head = f"{_source(record, zh)}；{n} 轮的中位数（括号里是最小值–最大值），两种缓存轮流运行："
        tail = (f"按轮计算，缓存让多轮对话的平均 TTFT 降低了 {_range(ct, '.2f')} 倍，总时间缩短了 {_range(cs, '.2f')} 倍；"
                f"文档问答分别是 {_range(dt, '.2f')} 倍和 {_range(ds, '.2f')} 倍。"
                f"开启和关闭缓存给出相同贪心 token 的轮数：对话 {chat['identical_rounds']} / {n}，"
                f"文档 {doc['identical_rounds']} / {n}。")
        if conc:
            tail += (f"按需分配页面时，{conc['requests']} 个不带 `max_tokens` 的请求中有 {conc['pages_on_demand']} 个同时运行；"
                     f"像以前那样在准入时预留 prompt + `max_tokens` 的页面，只能放进 {conc['reserved_up_front']} 个。")
    else:
        head = (f"{_source(record, zh)}; the median of {n} rounds (smallest–largest in brackets), "
                "the caches taking turns:")
        tail = (f"Round by round, the cache cut the chat's mean time to first token {_range(ct, '.2f')} times and its "
                f"total time {_range(cs, '.2f')} times; the document questions' {_range(dt, '.2f')} and "
                f"{_range(ds, '.2f')} times. Greedy tokens were the same with and without the cache in "
                f"{chat['identical_rounds']} of {n} chat rounds and {doc['identical_rounds']} of {n} document rounds.")
        if conc:
            tail += (f" With pages on demand {conc['pages_on_demand']} of {conc['requests']} `max_tokens`-less "
                     f"requests ran at once; reserving prompt + `max_tokens` up front, as admission did before, "
                     f"let {conc['reserved_up_front']} in.")
    return "\n".join([head, "", *lines, "", tail]) + "\n"


def moe(record: dict, zh: bool) -> str:
    """Chapter 14: decode step times, throughput, bytes per decode token and comm share of both splits."""
    r = record["results"]
    sizes = sorted(int(k.rsplit("_", 1)[1]) for k in r["tp"] if k.startswith("step_ms_batch_"))
    biggest = sizes[-1]

    def steps(split: str) -> str:
        """`2.50 ms at batch 1, 6.90 at 64` (in the page's language)."""
        ms = [f"{r[split][f'step_ms_batch_{b}']['median']:.2f}" for b in sizes]
        if zh:
            return "，".join(f"批大小 {b} 时 {m} ms" for b, m in zip(sizes, ms))
        return ", ".join([f"{ms[0]} ms at batch {sizes[0]}"] + [f"{m} at {b}" for b, m in zip(sizes[1:], ms[1:])])

    def nbytes(split: str, kind: str) -> str:
        return f"{r[split]['decode_bytes_per_token'].get(kind, 0):,.0f}"

    shape = f"{r['shape']}, {r['layers']} layers, {r['dtype']}, tp {r['tp_size']}"
    if zh:
        return (f"{_source(record, zh)}（{shape}；{r['rounds']} 轮的中位数，两种切分轮流运行）："
                f"TP 切分下，一个解码步{steps('tp')}，{r['requests']} 个请求（各 "
                f"{r['prompt_len']} 个 prompt token、{r['new_tokens']} 个新 token，含 prefill）的离线吞吐量为 "
                f"{_range(r['tp']['output_tok_per_s'], ',.0f')} output tokens/s；EP 切分下为{steps('ep')}，以及 "
                f"{_range(r['ep']['output_tok_per_s'], ',.0f')} tokens/s。批大小 {biggest} 时，rank 0 每个解码 token "
                f"交出 TP 的 all-reduce {nbytes('tp', 'all_reduce')} 字节，EP 的 all-reduce {nbytes('ep', 'all_reduce')} "
                f"字节加 all-to-all {nbytes('ep', 'all_to_all')} 字节（两者另有 all-gather："
                f"{nbytes('tp', 'all_gather')} 和 {nbytes('ep', 'all_gather')}）；计数器显示 TP 的解码步中 "
                f"{r['tp']['comm_share']:.0%} 花在集合通信上，EP 是 {r['ep']['comm_share']:.0%}。\n").replace("%", " %")
    return (f"{_source(record, zh)} ({shape}; the median of {r['rounds']} rounds, "
            f"the splits taking turns): with the TP split a decode step took {steps('tp')}, and "
            f"{r['requests']} requests offline ({r['prompt_len']} prompt tokens and {r['new_tokens']} new tokens each, "
            f"prefill included) gave {_range(r['tp']['output_tok_per_s'], ',.0f')} output tokens/s; with the EP split "
            f"{steps('ep')}, and {_range(r['ep']['output_tok_per_s'], ',.0f')} tokens/s. Per decode token at batch "
            f"{biggest}, rank 0 handed in {nbytes('tp', 'all_reduce')} bytes of all-reduce (TP) against "
            f"{nbytes('ep', 'all_reduce')} of all-reduce plus {nbytes('ep', 'all_to_all')} of all-to-all (EP) (and "
            f"all-gather: {nbytes('tp', 'all_gather')} and {nbytes('ep', 'all_gather')}), and the counter put "
            f"{r['tp']['comm_share']:.0%} of TP's step in collectives against {r['ep']['comm_share']:.0%} of EP's.\n"
            ).replace("%", " %")


RENDERERS: dict[str, Callable[[dict, bool], str]] = {"prefix_cache": prefix_cache, "moe": moe}


def render(chapter: Path, text: str, zh: bool) -> str:
    def block(match: re.Match) -> str:
        data = chapter / match.group(2)
        if not data.is_file():
            return match.group(0)
        renderer = RENDERERS[data.stem.split("-")[0]]
        return match.group(1) + renderer(json.loads(data.read_text()), zh) + match.group(4)

    return BLOCK.sub(block, text)


def main() -> None:
    tr = _translations()
    for chapter in sorted((ROOT / "chapters").glob("[0-9][0-9]-*")):
        english, chinese = chapter / "README.md", chapter / "README.zh.md"
        if "<!-- measured:" not in english.read_text():
            continue
        was_current = chinese.is_file() and tr.recorded_hash(chinese.read_text()) == tr.english_hash(english)
        english.write_text(render(chapter, english.read_text(), zh=False))
        if chinese.is_file():
            text = render(chapter, chinese.read_text(), zh=True)
            if was_current:
                text = tr.HASH_LINE.sub(tr.hash_line(english) + "\n", text, count=1)
            chinese.write_text(text)
        print(f"{chapter.name}: measured passages written" + ("" if was_current else
              " (the Chinese page was behind the English one before: its hash is left for its translator)"))


if __name__ == "__main__":
    main()
