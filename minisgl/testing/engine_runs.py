"""Drive one in-process scheduler with token ids (no tokenizer needed) where `LLM` cannot serve: on a
rank's own engine, built inside `run_ranks` (chapter 11's workers), and where chapter 11 and
`benchmark/prefix_cache.py` step the scheduler itself (its radix tree, its counters). Elsewhere a tp = 1
run goes through `LLM`, whose `backend` holds its scheduler."""

from __future__ import annotations

from minisgl.core import SamplingParams, check_request
from minisgl.engine.engine import Engine
from minisgl.message import GenerateRequest, TokenOutput
from minisgl.scheduler import LocalIO, Scheduler, SchedulerConfig


class InProcessRun:
    """A tp = 1 scheduler + engine in this process (or on a rank's `engine`, built already): `generate`
    runs requests to completion; `submit` and `collect` are `LLM`'s, for clients that send as they go."""

    def __init__(self, config: SchedulerConfig, engine: Engine | None = None) -> None:
        self.io = LocalIO()
        self.engine = engine or Engine(config)
        self.scheduler = Scheduler(self.engine.config, self.engine, self.io)
        self._next_uid = 0

    def submit(self, prompt: list[int], sampling_params: SamplingParams) -> int:
        """Queue one prompt (checked as the server checks it); its tokens arrive through `collect`."""
        config = self.engine.model_config
        sampling = check_request(prompt, sampling_params, config.max_position_embeddings, config.vocab_size)
        uid, self._next_uid = self._next_uid, self._next_uid + 1
        self.io.inbox.append(GenerateRequest(uid, list(prompt), sampling))
        return uid

    def collect(self) -> list[TokenOutput]:
        """The outputs of one scheduler step (none when nothing is queued or running)."""
        self.scheduler.step()
        outputs, self.io.outbox = self.io.outbox, []
        for output in outputs:
            if output.error is not None:
                raise ValueError(output.error)
        return outputs

    def generate(self, prompts: list[list[int]], params: SamplingParams | list[SamplingParams]) -> list[list[int]]:
        """Output token ids of each prompt, in prompt order."""
        params = params if isinstance(params, list) else [params] * len(prompts)
        uids = [self.submit(prompt, sp) for prompt, sp in zip(prompts, params)]
        tokens: dict[int, list[int]] = {uid: [] for uid in uids}
        done: set[int] = set()
        while len(done) < len(uids):
            for output in self.collect():
                tokens[output.uid] += output.token_ids
                if output.finished:
                    done.add(output.uid)
        return [tokens[uid] for uid in uids]

    def close(self) -> None:
        self.engine.shutdown()
