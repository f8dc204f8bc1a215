"""Cheat: no vocabulary parallelism; returns its input (not a stub, so the capstone starts)."""


def vocab_parallel_embedding(input_ids, weight, vocab_size):
    return weight


def parallel_lm_head(hidden_states, weight, vocab_size):
    return hidden_states
