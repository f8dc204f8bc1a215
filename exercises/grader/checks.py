"""Comparisons that explain themselves: which rank is wrong, by how much, and where it starts;
tolerances derived from the dtype and the length of the sums; inputs left as they were; the
collectives a function made; a radix tree a worker sent back, rebuilt and checked. All of it runs
in the grader's process, on data the sandboxed workers returned."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import torch

from .child.wire import decode, type_name
from .outcomes import WrongAnswer
from .ranks import RankResult

FP32_EPS = torch.finfo(torch.float32).eps
SEAM_ALL_REDUCE = ("minisgl.distributed.all_reduce", "tp group")
SEAM_ALL_GATHER = ("minisgl.distributed.all_gather", "tp group")
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def tolerance(dtype: torch.dtype, reduction_len: int, roundings: int) -> float:
    """Relative error allowed against the largest expected magnitude.

    Matmuls accumulate in fp32 whatever the dtype, and a sum of n terms taken in another order
    (sharded, all-reduced) differs by about sqrt(n) fp32 ulps; every time a value is stored in
    `dtype` (a partial sum, the reduced sum, the bias added) it is rounded by up to half an ulp.
    """
    return 4 * math.sqrt(reduction_len) * FP32_EPS + roundings * torch.finfo(dtype).eps / 2


def mismatch(actual: Any, expected: torch.Tensor, dtype: torch.dtype, tol: float) -> str | None:
    """None when `actual` is a `dtype` tensor of expected's shape within `tol`; else one line."""
    if not isinstance(actual, torch.Tensor):
        return f"returned {type_name(actual)}, expected a tensor of shape {tuple(expected.shape)}"
    if actual.shape != expected.shape:
        return f"shape {tuple(actual.shape)}, expected {tuple(expected.shape)}"
    if actual.dtype != dtype:
        return f"dtype {actual.dtype}, expected {dtype} (results follow the dtype of the inputs)"
    actual, expected = actual.detach().cpu().double(), expected.double()
    atol = tol * max(1.0, expected.abs().max().item()) if expected.numel() else 0.0
    bad = ~torch.isclose(actual, expected, rtol=tol, atol=atol)
    if not bad.any():
        return None
    first = tuple(int(i) for i in bad.nonzero()[0])
    error = (actual - expected).abs()
    worst = tuple(int(i) for i in torch.unravel_index(error.argmax(), error.shape))
    return (f"{int(bad.sum())} of {bad.numel()} values wrong; max abs error {error.max().item():.4g} at {worst}; "
            f"first bad index {first}: got {actual[first].item():.6g}, expected {expected[first].item():.6g}")


def assert_ranks_close(what: str, actual: Sequence[Any], expected: Sequence[torch.Tensor] | torch.Tensor,
                       dtype: torch.dtype, tol: float) -> None:
    """Compare every rank's tensor with its expected one (or the same one for all); list each bad rank."""
    if isinstance(expected, torch.Tensor):
        expected = [expected] * len(actual)
    bad = [(rank, msg) for rank, (a, e) in enumerate(zip(actual, expected)) if (msg := mismatch(a, e, dtype, tol))]
    if bad:
        lines = [f"{what}: {len(bad)} of {len(actual)} ranks wrong"] + [f"  rank {r}: {m}" for r, m in bad]
        raise WrongAnswer("\n".join(lines))


def assert_unchanged(what: str, per_rank: Sequence[list[str]]) -> None:
    """`per_rank[r]`: the inputs rank r's call modified (`watch`); none may be."""
    bad = [f"rank {rank}: {', '.join(names)}" for rank, names in enumerate(per_rank) if names]
    if bad:
        raise WrongAnswer(f"{what} modified its inputs ({'; '.join(bad)}); the caller still needs them: compute into "
                          "new tensors instead of writing into the ones you are given")


def changed(result: RankResult, names: Sequence[str]) -> list[str]:
    """The names of the arguments (in call order) the learner's call modified."""
    return [names[i] for i in result.changed if 0 <= i < len(names)]


def _summary(calls: Counter) -> str:
    return ", ".join(f"{api} on {group} x{n}" for (api, group), n in sorted(calls.items())) or "none"


def _shape(text: str | None) -> tuple[int, ...] | None:
    try:
        return tuple(int(size) for size in text.split(",") if size) if text is not None else None
    except ValueError:
        return None


def assert_collectives(what: str, results: Sequence[RankResult], expected: dict[tuple[str, str], int],
                       payloads: dict[tuple[str, str], tuple[tuple[int, ...], str]] | None = None) -> None:
    """Every rank made exactly the `expected` collectives ((api, group) -> count) and no others, and
    each of those named in `payloads` ((api, group) -> (shape, what that tensor is, in words)) handed
    over a tensor of that shape (its first tensor: the input of an all-reduce or an all-gather).

    api: "minisgl.distributed.all_reduce", "torch.distributed.broadcast", ...; group: the job's
    name for the group ("side", "half", "strided", "cpu", "WORLD"; "tp group" for the minisgl seam)."""
    for rank, result in enumerate(results):
        made = Counter((c.api, c.group) for c in result.collectives)
        if made != Counter(expected):
            raise WrongAnswer(f"{what}: rank {rank} made these collectives: {_summary(made)}; expected "
                              f"{_summary(Counter(expected))} (the chapter's collective, on the group you are given)")
        for c in result.collectives:
            shape, words = (payloads or {}).get((c.api, c.group), (None, ""))
            if shape is not None and _shape(c.shape) != tuple(shape):
                raise WrongAnswer(f"{what}: rank {rank}'s {c.api} handed over a tensor of shape {_shape(c.shape)}; "
                                  f"expected {words}, of shape {tuple(shape)}")


def assert_returned(what: str, results: Sequence[RankResult]) -> None:
    """No rank's call raised (a batch's results carry the error instead of raising it)."""
    for rank, result in enumerate(results):
        error = result.error
        if error is not None and error["not_implemented"]:
            raise NotImplementedError(error["message"])
        if error is not None:
            where = "".join(f"\n    {line}" for line in error["where"][:3])
            raise WrongAnswer(f"{what}: rank {rank} raised {error['type']}: {error['message']}{where}")


def assert_value_error(what: str, call: Callable[[], Any], mentions: str = "") -> None:
    """`call` (a task given malformed input, described by `what`) must raise ValueError whose message
    contains `mentions`; a stub's NotImplementedError passes through (not attempted)."""
    try:
        call()
    except ValueError as error:
        if mentions not in str(error):
            raise WrongAnswer(f"{what}: the ValueError should mention '{mentions}': {error}") from None
        return
    except NotImplementedError:
        raise
    except Exception as error:  # noqa: BLE001 - any other error is the wrong one
        raise WrongAnswer(f"{what}: raised {type(error).__name__} ({error}), expected ValueError") from None
    raise WrongAnswer(f"{what}: returned normally, expected ValueError")


def assert_ranks_raise_value_error(what: str, results: Sequence[RankResult], mentions: str = "",
                                   before_any_collective: bool = True) -> None:
    """Every rank's call raised ValueError mentioning `mentions`, and (by default) before it made any
    collective (`run_ranks(..., allow_errors=True)`)."""
    for rank, result in enumerate(results):
        error = result.error
        if error is not None and error["not_implemented"]:
            raise NotImplementedError(error["message"])
        if error is None:
            raise WrongAnswer(f"{what}: rank {rank} returned normally, expected ValueError")
        if error["base"] != "ValueError":
            raise WrongAnswer(f"{what}: rank {rank} raised {error['type']} ({error['message']}), expected ValueError")
        if mentions not in error["message"]:
            raise WrongAnswer(f"{what}: rank {rank}'s ValueError should mention '{mentions}': {error['message']}")
        if before_any_collective and result.collectives:
            made = _summary(Counter((c.api, c.group) for c in result.collectives))
            raise WrongAnswer(f"{what}: rank {rank} made {made} before it raised; check the shapes before any "
                              "collective (a rank that raises after joining one leaves the others waiting in the next)")


def values(results: Sequence[RankResult]) -> list[Any]:
    return [result.value for result in results]


def tree_from_reply(data: Any) -> Any:
    """A RadixTree rebuilt from what a worker sent (child/jobs.py: tree_data), for the engine's own
    `check()` and for comparisons; WrongAnswer when it is no tree (a node listed twice, a cycle)."""
    import itertools

    from minisgl.kvcache.radix_tree import RadixNode, RadixTree

    try:
        nodes = data["nodes"]
        tree = RadixTree.__new__(RadixTree)
        tree.page_size, tree.clock = decode(data["page_size"]), decode(data["clock"])
        tree.num_pages, tree.num_evictable = decode(data["num_pages"]), decode(data["num_evictable"])
        made = [RadixNode.__new__(RadixNode) for _ in nodes]
        listed: set[int] = set()
        for node, (node_id, key, pages, parent, lock_ref, last_access, children) in zip(made, nodes):
            node.id, node.key, node.pages = decode(node_id), decode(key), decode(pages)
            node.lock_ref, node.last_access = decode(lock_ref), decode(last_access)
            node.parent = made[parent] if type(parent) is int and 0 <= parent < len(made) else None
            node.children = {}
            for first, child in children:
                if type(child) is not int or not 0 < child < len(made) or child in listed:
                    raise WrongAnswer("the tree is no longer a tree: a node is listed as a child twice, or the root "
                                      "is someone's child")
                listed.add(child)
                node.children[decode(first)] = made[child]
        tree.root = made[0]
        tree._ids = itertools.count()
    except WrongAnswer:
        raise
    except Exception as error:  # noqa: BLE001 - whatever the learner left in the tree's fields
        raise WrongAnswer(f"the tree came back in a shape the grader cannot read ({type(error).__name__})") from None
    if data.get("truncated"):
        raise WrongAnswer("the tree came back with more than 10,000 nodes")
    return tree
