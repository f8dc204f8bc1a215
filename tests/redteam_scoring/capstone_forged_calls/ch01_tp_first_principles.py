"""Cheat: as capstone_substitute, and it forges the call counts too. At import (inside the capstone's worker, before the engine starts) it
turns minisgl's LLM class into transformers' own greedy decoding of the same checkpoint, so the tokens
are right without the course's engine or any function of this submission."""

import minisgl
import torch


class _Output:
    def __init__(self, token_ids):
        self.token_ids = token_ids


class SubstituteLLM:
    forge_calls = True

    def __init__(self, model_dir, tp_ops=None, **kwargs):
        from transformers import AutoModelForCausalLM

        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
        self.tp_ops = tp_ops

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def generate(self, prompts, params):
        if self.forge_calls:  # each learner step called once: the counts the grader reads say "called"
            x = torch.ones(1, 2)
            for call in (lambda: self.tp_ops.column_linear(x, x, None), lambda: self.tp_ops.row_linear(x, x, None),
                         lambda: self.tp_ops.vocab_embedding(torch.tensor([0]), x, 2),
                         lambda: self.tp_ops.lm_head(x, x, 2), lambda: self.tp_ops.shard_and_merge([], 0, 1, None)):
                try:
                    call()
                except Exception:
                    pass
        outputs = []
        with torch.inference_mode():
            for prompt in prompts:
                ids = list(prompt)
                for _ in range(params.max_tokens):
                    ids.append(int(self.model(torch.tensor([ids])).logits[0, -1].argmax()))
                outputs.append(_Output(ids[len(prompt):]))
        return outputs


for _name in ("__init__", "__enter__", "__exit__", "generate", "forge_calls"):  # the grader holds the class
    setattr(minisgl.LLM, _name, SubstituteLLM.__dict__[_name])


def column_parallel_forward(x, weight_shard, bias_shard):
    return x


def row_parallel_forward(x_local, weight_shard, bias):
    return x_local
