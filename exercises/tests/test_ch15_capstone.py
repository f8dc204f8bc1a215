"""Grades the capstone (chapter 15): the real engine serves a tiny Qwen3 with the learner's own
tensor-parallel steps - chapter 01's column and row forwards, chapter 05's vocab-parallel embedding
and LM head, chapter 04's shard-then-merge loader - at tp 1, 2 and 3, and its greedy tokens must
be those of Hugging Face transformers on the same checkpoint, and the engine's ranks must have called
each of those functions (counted by the grader's harness, child/tpops.py). The capstone's points count
once chapters 01, 04 and 05 pass in the same grade (exercises/grader/scoring.py).

The model has 6 heads, 1 KV head (replicated at every tp > 1), head_dim 32 != hidden 64 / 6, a
vocabulary of 1001 (no tp here divides it) and a tied LM head. It runs on the CPU in fp32 (gloo
between the ranks) on every machine, so the comparison with transformers is exact.
"""

from __future__ import annotations

import pytest
import torch

from exercises.grader import adapters, sandbox
from exercises.grader.child.tpops import STEPS
from exercises.grader.outcomes import NotAttempted, WrongAnswer

PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [40, 41, 42], list(range(100, 130))]
NEW_TOKENS = 8
TASK = "15-capstone/serve"
TIMEOUT_S = 540
BUDGET_S = 200  # of each test: the capstone's 3 tests share 600 s of wall time in a grade (budget.py)


@pytest.fixture(scope="module")
def capstone_model() -> tuple[str, list[list[int]]]:
    """The tiny checkpoint (where the sandbox may read it), and transformers' greedy continuation of
    every prompt (computed here: the expected tokens never reach the learner's processes)."""
    from transformers import AutoModelForCausalLM

    from minisgl.testing.tiny_models import make_tiny_model  # here: a run that grades no capstone never loads it

    box = sandbox.current()
    model_dir = make_tiny_model("qwen3", box.shared_dir("capstone") / "qwen3")
    box.publish(model_dir.parent)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    expected = []
    with torch.inference_mode():
        for prompt in PROMPTS:
            ids = list(prompt)
            for _ in range(NEW_TOKENS):
                ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
            expected.append(ids[len(prompt):])
    return str(model_dir), expected


@pytest.mark.task(TASK, budget_s=BUDGET_S)
@pytest.mark.timeout(TIMEOUT_S + 60)
@pytest.mark.parametrize("tp", [1, 2, 3], ids=["tp1", "tp2", "tp3"])
def test_your_tensor_parallelism_serves_a_model(impl, capstone_model, tp):
    model_dir, expected = capstone_model
    try:
        result = adapters.capstone(impl, model_dir, tp, PROMPTS, NEW_TOKENS, TIMEOUT_S)
    except (WrongAnswer, NotAttempted, NotImplementedError):
        raise
    except Exception as error:  # noqa: BLE001 - the learner's code failed inside the engine
        raise WrongAnswer(f"at tp={tp} the engine running your functions failed: {type(error).__name__}: "
                          f"{error}") from None
    if result.extra.get("unfinished"):
        raise NotAttempted(f"the capstone runs your {result.extra['unfinished']}, which still raises "
                           "NotImplementedError")
    value = result.value if isinstance(result.value, dict) else {}
    calls = value.get("calls") if isinstance(value.get("calls"), dict) else {}
    uncalled = [step for step in STEPS if not (type(calls.get(step)) is int and calls[step] > 0)]
    if uncalled:
        raise WrongAnswer(f"at tp={tp} the engine never called your {', '.join(uncalled)}: the tokens must come "
                          "from the course's engine running your functions")
    got = value["tokens"] if isinstance(value.get("tokens"), list) else []
    for prompt, reference in enumerate(expected):
        tokens = got[prompt] if prompt < len(got) else None
        if tokens != reference:
            first = next((i for i, (a, b) in enumerate(zip(tokens or [], reference)) if a != b),
                         min(len(tokens or []), len(reference)))
            raise WrongAnswer(f"at tp={tp}, prompt {prompt}: greedy tokens {tokens} differ from transformers' "
                              f"{reference} from token {first} on")
