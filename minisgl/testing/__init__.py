"""Helpers for the tests, the course notebooks, the exercise grader and the benchmarks:

- `tiny_models`: tiny deterministic random-weight checkpoints with real tokenizers (chapter 00);
- `shapes`: config-only directories of real model shapes, for dummy-weight runs;
- `multiprocess`: `run_ranks`, a function on N real gloo ranks (chapters 01-09);
- `engine_runs`: a scheduler in this process where `LLM` cannot serve (on a rank's own engine);
- `multi_turn`: a multi-turn chat of closed-loop clients through `LLM` (chapter 11);
- `attention_checks`: paged-attention cases against the torch reference backend (chapter 10);
- `server`: `python -m minisgl` as a subprocess on a free port;
- `tolerance`: how far two correct results of one matmul may be apart.
"""
