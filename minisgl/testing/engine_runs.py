"""Drive one in-process scheduler with token ids (no tokenizer needed): the GPU tests and the
benchmarks use it on config-only model directories."""

from __future__ import annotations

from minisgl.core import SamplingParams, check_request
from minisgl.engine.engine import Engine
from minisgl.message import GenerateRequest
from minisgl.scheduler import LocalIO, Scheduler, SchedulerConfig


class InProcessRun:
    """A tp = 1 scheduler + engine in this process; `generate` runs requests to completion."""

    def __init__(self, config: SchedulerConfig) -> None:
        self.io = LocalIO()
        self.engine = Engine(config)
        self.scheduler = Scheduler(config, self.engine, self.io)
        self._next_uid = 0

    def generate(self, prompts: list[list[int]], params: SamplingParams | list[SamplingParams]) -> list[list[int]]:
        """Output token ids of each prompt, in prompt order."""
        params = params if isinstance(params, list) else [params] * len(prompts)
        uids = list(range(self._next_uid, self._next_uid + len(prompts)))
        self._next_uid += len(prompts)
        config = self.engine.model_config
        self.io.inbox.extend(
            GenerateRequest(uid, list(p), check_request(p, sp, config.max_position_embeddings, config.vocab_size))
            for uid, p, sp in zip(uids, prompts, params)
        )
        tokens: dict[int, list[int]] = {uid: [] for uid in uids}
        done: set[int] = set()
        while len(done) < len(uids):
            self.scheduler.step()
            for output in self.io.outbox:
                if output.error is not None:
                    raise ValueError(output.error)
                tokens[output.uid] += output.token_ids
                if output.finished:
                    done.add(output.uid)
            self.io.outbox.clear()
        return [tokens[uid] for uid in uids]

    def close(self) -> None:
        self.engine.shutdown()
