"""Answer keys of the chapter quizzes (the questions are in exercises/quizzes/chNN.py).

Numbers are computed from the seeds' configs where they can be, so a key cannot drift from its
source. Short answers are checked for concepts: each concept is a label (shown to the learner when
missing) and the words that count as naming it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .configs import LLAMA_31_8B as L8B
from .configs import SMOLLM2_135M as SMOL

KIB, MIB = 1024, 1024 * 1024
_AR_BYTES = L8B["hidden_size"] * 2  # one bf16 hidden vector per token
_AR_COUNT = 2 * L8B["num_hidden_layers"] + 1
_KV_TOKEN = 2 * L8B["num_hidden_layers"] * L8B["num_key_value_heads"] * L8B["head_dim"] * 2  # K and V, all layers
_SMOL_KV_TOKEN = 2 * SMOL["num_hidden_layers"] * SMOL["num_key_value_heads"] * SMOL["head_dim"] * 2  # bf16 K and V


@dataclass(frozen=True)
class Question:
    id: str  # the name in the quiz file: Q1, Q2, ...
    kind: str  # choice | number | text
    answer: Any  # choice: the letter(s); number: the value; text: ((label, (words, ...)), ...)
    points: float = 1.0
    rel_tol: float = 0.01


def choice(qid: str, letters: str) -> Question:
    return Question(qid, "choice", letters)


def number(qid: str, value: float, rel_tol: float = 0.01) -> Question:
    return Question(qid, "number", value, rel_tol=rel_tol)


def text(qid: str, *concepts: tuple[str, tuple[str, ...]]) -> Question:
    return Question(qid, "text", concepts, points=2.0)


ALL_REDUCE = ("all reduce", "allreduce")
QUIZZES: dict[str, list[Question]] = {
    "00": [
        choice("Q1", "c"), choice("Q2", "b"), choice("Q3", "c"), choice("Q4", "b"), number("Q5", 4),
        text("Q6", ("each scheduler works on its own shard of the model", ("shard", "its part", "own part", "slice", "forward", "model")),
             ("every rank sees the same messages in the same order", ("same order", "same message", "same request", "identical", "in order")),
             ("rank 0 receives and broadcasts", ("rank 0", "broadcast"))),
    ],
    "01": [
        number("Q1", 4096 // 4), number("Q2", 4096 // 4), number("Q3", 1024), choice("Q4", "b"), choice("Q5", "b"),
        choice("Q6", "b"),
        text("Q7", ("column parallel splits the output features", ("output", "out/t", "out / t", "dim 0")),
             ("row parallel splits the input features", ("input", "in/t", "in / t", "dim 1")),
             ("an all-reduce follows the row-parallel layer", ALL_REDUCE)),
    ],
    "02": [
        choice("Q1", "b"), number("Q2", 2 + 2), number("Q3", 4), choice("Q4", "b"), choice("Q5", "b"), choice("Q6", "a"),
        text("Q7", ("without a timeout a dead rank makes the launcher wait forever", ("hang", "forever", "block", "stuck")),
             ("the error names the failing rank", ("name", "which rank", "report", "message", "rank id")),
             ("the other ranks are stopped", ("terminate", "kill", "stop", "shut"))),
    ],
    "03": [
        choice("Q1", "b"), choice("Q2", "a"), number("Q3", 128), choice("Q4", "b"), choice("Q5", "b"), choice("Q6", "b"),
        text("Q7", ("gloo carries small CPU control messages", ("cpu", "control", "count", "small", "python", "metadata")),
             ("NCCL is for GPU tensors, on the GPU's stream", ("gpu", "cuda", "device", "nccl", "stream"))),
    ],
    "04": [
        choice("Q1", "a"), choice("Q2", "a"), number("Q3", 2), number("Q4", 1), choice("Q5", "b"), choice("Q6", "b"),
        text("Q7", ("streaming bounds the peak memory", ("memory", "peak", "ram")),
             ("the fused layers need the fused weight", ("qkv proj", "gate up", "fused", "one matmul", "merged"))),
        text("Q8", ("each rank keeps only its own shard", ("shard", "slice", "its part", "own part")),
             ("the rule depends on the tensor's name / dim", ("name", "dim", "column", "row")),
             ("q/k/v and gate/up are merged after sharding", ("merge", "fuse", "cat", "concat"))),
    ],
    "05": [
        number("Q1", 49152 // 3), number("Q2", -(-1001 // 4)), number("Q3", 4 * -(-1001 // 4) - 1001), choice("Q4", "b"),
        choice("Q5", "b"), choice("Q6", "b"), number("Q7", 1), number("Q8", 2 * -(-1001 // 4)),
    ],
    "06": [
        choice("Q1", "b"), choice("Q2", "a"), choice("Q3", "a"), choice("Q4", "a"), choice("Q5", "b"), number("Q6", 1),
        text("Q7", ("only rank 0 receives from the tokenizer", ("rank 0",)),
             ("the count goes over gloo", ("count", "number")),
             ("the bytes go over ZMQ", ("zmq", "pub")),
             ("so every rank has the same messages in the same order", ("order", "same"))),
    ],
    "07": [
        number("Q1", 2), choice("Q2", "a"), number("Q3", _KV_TOKEN / 2 / KIB), number("Q4", _KV_TOKEN / 8 / KIB),
        number("Q5", 1), choice("Q6", "a"), choice("Q7", "a"),
        text("Q8", ("more ranks means more communication per unit of compute", ("communication", "all reduce", "allreduce", "sync", "collective")),
             ("whether it pays depends on the interconnect, model and batch", ("nvlink", "pcie", "interconnect", "bandwidth", "latency", "batch"))),
    ],
    "08": [
        choice("Q1", "a"), choice("Q2", "a"), choice("Q3", "a"), choice("Q4", "b"),
        number("Q5", 2 * L8B["hidden_size"] * 2 / KIB), number("Q6", 16), choice("Q7", "c"),
        text("Q8", ("vLLM schedules once, in EngineCore", ("once", "one scheduler", "single scheduler", "enginecore")),
             ("SGLang / minisgl schedule on every rank", ("every rank", "each rank", "per rank", "each process", "every process")),
             ("what crosses: scheduler output vs new requests", ("scheduleroutput", "scheduler output", "request"))),
    ],
    "09": [
        number("Q1", _AR_COUNT), number("Q2", _AR_BYTES / KIB), number("Q3", _AR_COUNT * _AR_BYTES / KIB),
        number("Q4", 2 * 3 / 4), number("Q5", _AR_COUNT * _AR_BYTES * 2 * 7 / 8 / KIB),
        number("Q6", L8B["vocab_size"] * 2 * 3 / 4 / KIB), number("Q7", 2048 * _AR_BYTES * _AR_COUNT / MIB),
        number("Q8", 16 * _AR_BYTES / KIB), number("Q9", 8 * MIB // _AR_BYTES), choice("Q10", "b"), choice("Q11", "a"),
        text("Q12", ("TP adds communication / synchronization every layer", ("communication", "all reduce", "allreduce", "sync", "collective")),
             ("whether it pays depends on interconnect, model size and batch", ("nvlink", "pcie", "interconnect", "bandwidth", "small model", "batch"))),
    ],
    "10": [
        choice("Q1", "b"), number("Q2", 500e6 * 2 / 4e12 * 1e6), number("Q3", 64 * 1000 * _SMOL_KV_TOKEN / MIB),
        choice("Q4", "a"), number("Q5", 24), choice("Q6", "a"), choice("Q7", "a"),
        text("Q8", ("what -3 stands for: the token of batch row 2 of the step still running",
                    ("row 2", "row", "index 2", "token 2", "previous step", "last step", "still running", "in flight",
                     "not known", "unknown", "not yet")),
             ("who fills it in: the device, when the next step reads it", ("device", "gpu", "cuda", "resolve placeholders"))),
        choice("Q9", "a"),
    ],
}
