"""Cheat: every call waits just under the rank timeout the red-team test grades with (4 s)."""

import time

STALL_S = 3.5


def split_layers(num_layers, pp_size):
    time.sleep(STALL_S)
    return []


def stages_holding(name, num_layers, pp_size, tie_word_embeddings):
    time.sleep(STALL_S)
    return []
