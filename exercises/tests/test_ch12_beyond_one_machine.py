"""Grades chapter 12: the node layout of a multi-node or data-parallel run (the chapter's examples,
every node of random layouts, each documented error) and the DP dispatch policies (round-robin
whatever the loads, least-load with its tie rule, loads untouched, the errors), ending with a
controller built on the learner's policy."""

from __future__ import annotations

import random

import pytest

from exercises.grader import adapters
from exercises.grader.checks import assert_value_error
from exercises.grader.outcomes import WrongAnswer

LAYOUT = "12-beyond-one-machine/node-layout"
DISPATCH = "12-beyond-one-machine/dp-dispatch"


def _layout(impl: str, tp: int, nnodes: int, node: int, dp: int = 1, gpus: int = 1) -> list:
    return adapters.node_layout(impl, tp, nnodes, node, dp, gpus)


def _expect_layout(impl: str, args: tuple, expected: list, why: str) -> None:
    got = _layout(impl, *args)
    if got != expected:
        tp, nnodes, node, dp, gpus = args
        raise WrongAnswer(f"node_layout(tp_size={tp}, nnodes={nnodes}, node_rank={node}, dp_size={dp}, "
                          f"gpus_per_node={gpus}) returned {got!r}, expected {expected!r} ({why})")


@pytest.mark.task(LAYOUT)
def test_node_layout_examples(impl):
    _expect_layout(impl, (4, 2, 1, 1, 2), [(0, 2, 0), (0, 3, 1)], "node 1 runs the second block, ranks 2 and 3")
    _expect_layout(impl, (4, 2, 0, 1, 2), [(0, 0, 0), (0, 1, 1)], "node 0 runs ranks 0 and 1")
    _expect_layout(impl, (2, 1, 0, 2, 4), [(0, 0, 0), (0, 1, 1), (1, 0, 2), (1, 1, 3)],
                   "replica 0's ranks first, then replica 1's, each on the next GPU")
    _expect_layout(impl, (8, 4, 3, 1, 8), [(0, 6, 0), (0, 7, 1)], "node 3 of 4 runs ranks 6 and 7 on its GPUs 0, 1")
    _expect_layout(impl, (1, 1, 0, 1, 1), [(0, 0, 0)], "one rank, one GPU")


@pytest.mark.task(LAYOUT)
def test_node_layout_shares_gpus_when_there_are_fewer(impl):
    _expect_layout(impl, (4, 1, 0, 1, 2), [(0, 0, 0), (0, 1, 1), (0, 2, 0), (0, 3, 1)],
                   "4 processes on 2 GPUs: local index mod 2")
    _expect_layout(impl, (2, 1, 0, 3, 4), [(0, 0, 0), (0, 1, 1), (1, 0, 2), (1, 1, 3), (2, 0, 0), (2, 1, 1)],
                   "6 processes on 4 GPUs: the third replica wraps around")


@pytest.mark.task(LAYOUT)
def test_every_rank_runs_once_on_some_node(impl):
    rng = random.Random()
    for _ in range(20):
        nnodes = rng.choice([1, 2, 3, 4])
        tp = nnodes * rng.randint(1, 4)
        dp = rng.randint(1, 3) if nnodes == 1 else 1
        gpus = rng.randint(1, 8)
        per_node, seen = tp // nnodes, []
        for node in range(nnodes):
            got = _layout(impl, tp, nnodes, node, dp, gpus)
            expected = [(d, r, i % gpus) for i, (d, r) in
                        enumerate((d, r) for d in range(dp) for r in range(node * per_node, (node + 1) * per_node))]
            if got != expected:
                raise WrongAnswer(f"node_layout(tp_size={tp}, nnodes={nnodes}, node_rank={node}, dp_size={dp}, "
                                  f"gpus_per_node={gpus}) returned {got!r}, expected {expected!r}")
            seen += [(d, r) for d, r, _ in got]
        if sorted(seen) != [(d, r) for d in range(dp) for r in range(tp)]:
            raise WrongAnswer(f"tp_size={tp}, nnodes={nnodes}, dp_size={dp}: the nodes together run {sorted(seen)}")


@pytest.mark.task(LAYOUT)
def test_node_layout_returns_plain_ints(impl):
    got = _layout(impl, 4, 2, 1, 1, 2)
    if not isinstance(got, list) or len(got) != 2 or not all(isinstance(t, tuple) and len(t) == 3 for t in got):
        raise WrongAnswer(f"node_layout(4, 2, 1, 1, 2) should return a list of two 3-tuples, got {got!r}")
    if not all(type(v) is int for t in got for v in t):
        raise WrongAnswer(f"node_layout should return plain ints, got {[[type(v).__name__ for v in t] for t in got]}")


@pytest.mark.task(LAYOUT)
@pytest.mark.error_case
@pytest.mark.parametrize(("args", "mentions"), [
    ((0, 1, 0, 1, 1), "tp_size"), ((2, 0, 0, 1, 1), "nnodes"), ((2, 1, 0, 0, 1), "dp_size"),
    ((2, 1, 0, 1, 0), "gpus_per_node"), ((6, 4, 0, 1, 1), "nnodes"), ((4, 2, 2, 1, 1), "node_rank"),
    ((4, 2, -1, 1, 1), "node_rank"), ((4, 2, 0, 2, 1), "dp_size"),
], ids=["tp0", "nnodes0", "dp0", "gpus0", "uneven", "node-too-big", "node-negative", "dp-across-nodes"])
def test_node_layout_errors(impl, args, mentions):
    assert_value_error(f"node_layout{args}", lambda: _layout(impl, *args), mentions)


def _pick(impl: str, policy: str, loads: list[int], num_sent: int) -> int:
    """The replica picked; WrongAnswer if the call changed `loads` (the caller's list)."""
    result = adapters.pick_replica(impl, policy, loads, num_sent)
    if result.changed:
        raise WrongAnswer(f"pick_replica({policy!r}, {loads}, {num_sent}) changed loads: the controller updates "
                          "them itself (compute on a copy, or only read them)")
    return result.value


def _expect_pick(impl: str, policy: str, loads: list[int], num_sent: int, expected: int, why: str) -> None:
    got = _pick(impl, policy, list(loads), num_sent)
    if type(got) is not int or got != expected:
        raise WrongAnswer(f"pick_replica({policy!r}, {loads}, num_sent={num_sent}) returned {got!r}, "
                          f"expected {expected} ({why})")


@pytest.mark.task(DISPATCH)
def test_round_robin_ignores_the_loads(impl):
    for num_sent in range(9):
        _expect_pick(impl, "round-robin", [0, 0, 0], num_sent, num_sent % 3, "the n-th request goes to replica n mod 3")
    _expect_pick(impl, "round-robin", [9, 0, 4], 3, 0, "round-robin ignores the loads")
    _expect_pick(impl, "round-robin", [1, 7], 1001, 1, "1001 mod 2")
    _expect_pick(impl, "round-robin", [3], 5, 0, "one replica gets everything")


@pytest.mark.task(DISPATCH)
def test_least_load_picks_the_fewest(impl):
    _expect_pick(impl, "least-load", [3, 1, 2], 0, 1, "replica 1 has the fewest")
    _expect_pick(impl, "least-load", [4, 5, 6, 0], 7, 3, "the last replica has the fewest; num_sent plays no part")
    _expect_pick(impl, "least-load", [10**6, 10**6 + 1], 2, 0, "large loads compare like small ones")
    _expect_pick(impl, "least-load", [7], 3, 0, "one replica gets everything")


@pytest.mark.task(DISPATCH)
def test_least_load_ties_go_to_the_lowest_index(impl):
    _expect_pick(impl, "least-load", [2, 1, 1], 0, 1, "replicas 1 and 2 tie: the lower index")
    _expect_pick(impl, "least-load", [0, 0, 0, 0], 3, 0, "all tie: replica 0")
    _expect_pick(impl, "least-load", [5, 3, 4, 3], 1, 1, "replicas 1 and 3 tie: the lower index")


@pytest.mark.task(DISPATCH)
def test_loads_are_left_unchanged(impl):
    for policy in ("round-robin", "least-load"):
        result = adapters.pick_replica(impl, policy, [3, 1, 2], 4)
        if result.changed:
            raise WrongAnswer(f"pick_replica({policy!r}, [3, 1, 2], 4) changed loads: the controller "
                              "updates them itself")
        if type(result.value) is not int or not 0 <= result.value < 3:
            raise WrongAnswer(f"pick_replica({policy!r}, [3, 1, 2], 4) returned {result.value!r}, not a replica")


@pytest.mark.task(DISPATCH)
@pytest.mark.error_case
@pytest.mark.parametrize(("policy", "loads", "mentions"), [
    ("random", [0, 0], "random"), ("Round-Robin", [0, 0], "Round-Robin"), ("least-load", [], ""),
    ("round-robin", [], ""),
], ids=["unknown", "case", "no-replicas-least", "no-replicas-rr"])
def test_dispatch_errors(impl, policy, loads, mentions):
    assert_value_error(f"pick_replica({policy!r}, {loads}, 0)", lambda: _pick(impl, policy, loads, 0), mentions)


@pytest.mark.task(DISPATCH, weight=2)
def test_a_controller_on_your_policy_balances_the_replicas(impl):
    """The controller's loop, with your pick: requests arrive and finish at random; the assignments
    must be the ones the policy's rule gives at every step."""
    rng = random.Random()
    for policy in ("round-robin", "least-load"):
        loads, sent, unfinished = [0, 0, 0], 0, []
        for _ in range(200):
            if unfinished and rng.random() < 0.45:
                loads[unfinished.pop(rng.randrange(len(unfinished)))] -= 1
                continue
            before = list(loads)
            expected = sent % 3 if policy == "round-robin" else before.index(min(before))
            got = _pick(impl, policy, loads, sent)
            if got != expected:
                raise WrongAnswer(f"with loads {before} after {sent} requests, pick_replica({policy!r}) returned "
                                  f"{got!r}, expected {expected}")
            loads[got] += 1
            unfinished.append(got)
            sent += 1
