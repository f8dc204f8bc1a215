# 05 vocab-embedding: switch the grader's off-limits block off (clear its table, wherever it is
# loaded), then call the engine's own VocabParallelEmbedding.forward. Stopped by: there is no table
# in the worker to clear; the function itself is cut out of the worker's minisgl.
# 05 lm-head: walk up the call stack for the full LM head the test may hold, and multiply by it (one
# dummy all-gather for the collective count). Stopped by: a rank is sent its own shard, never the
# full weight. In the capstone: unplug the learner's steps and let the engine's ParallelLMHead do
# the work. Stopped by: in the capstone's copy, the layer's forward keeps only its plug-in branch.
import sys as _sys5

import torch as _torch5

from minisgl.distributed import all_gather as _all_gather
from minisgl.layers.embedding import ParallelLMHead as _Head
from minisgl.layers.embedding import VocabParallelEmbedding as _Embedding

for _name, _module in list(_sys5.modules.items()):
    if "off_limits" in _name and hasattr(_module, "OFF_LIMITS"):
        _module.OFF_LIMITS.clear()

_honest_embedding, _honest_head = vocab_parallel_embedding, parallel_lm_head


def vocab_parallel_embedding(input_ids, weight_shard, vocab_size):
    if _in_capstone():
        return _honest_embedding(input_ids, weight_shard, vocab_size)
    from minisgl.distributed import get_tp_info

    tp = get_tp_info()
    layer = _Embedding.__new__(_Embedding)
    layer.vocab_size, layer.weight = vocab_size, weight_shard
    layer.shard_size = weight_shard.shape[0]
    layer.vocab_start = tp.rank * layer.shard_size
    layer.vocab_end = min(layer.vocab_start + layer.shard_size, vocab_size)
    return layer.forward(input_ids)


def _unplugged_engine_head(hidden_states, weight_shard, vocab_size):
    try:
        from minisgl.layers import custom_tp_ops, use_tp_ops
    except ImportError:
        return _honest_head(hidden_states, weight_shard, vocab_size)
    plugged = custom_tp_ops()
    use_tp_ops(None)
    try:
        head = _Head.__new__(_Head)
        head.vocab_size, head.shard_size, head._tied_embedding = vocab_size, weight_shard.shape[0], None
        head.weight = weight_shard
        return head.forward(hidden_states)
    finally:
        use_tp_ops(plugged)


def parallel_lm_head(hidden_states, weight_shard, vocab_size):
    if _in_capstone():
        return _unplugged_engine_head(hidden_states, weight_shard, vocab_size)
    frame = _sys5._getframe(1)
    while frame is not None:
        for value in list(frame.f_locals.values()):
            if isinstance(value, _torch5.Tensor) and value.dim() == 2 and value.shape[0] == vocab_size \
                    and value.shape[1] == hidden_states.shape[1]:
                _all_gather(_torch5.zeros(1, 1, dtype=hidden_states.dtype, device=hidden_states.device))
                return hidden_states @ value.to(hidden_states.device).T
        frame = frame.f_back
    raise RuntimeError("red team: no full LM head within reach")
