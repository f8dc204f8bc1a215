# 04 qkv-gqa: a second copy of the engine's module, loaded from its file. 04 shard-rules:
# importlib.reload of the engine's module. Stopped by: the file the worker's minisgl comes from is
# the grader's copy with those functions cut out; there is no other copy it may read.
# 04 shard-then-merge: read the real engine's source from the course's folders (the grader's working
# folder, Gradescope's source) and exec it. Stopped by: the sandbox user cannot read those folders
# (without a sandbox user, the process boundary alone does not stop this one). Honest in the capstone.
import importlib as _importlib
import importlib.util as _util

import minisgl.layers.linear as _linear
import minisgl.models.weight as _weight


def _second_copy(module):
    spec = _util.spec_from_file_location(module.__name__ + "_second", module.__file__)
    copy = _util.module_from_spec(spec)
    spec.loader.exec_module(copy)
    return copy


def kv_heads_of_rank(rank, tp_size, num_kv_heads):
    linear = _second_copy(_linear)
    return linear.kv_head_offset(rank, num_kv_heads, tp_size), linear.local_kv_heads(num_kv_heads, tp_size)


def shard_qkv(q, k, v, rank, tp_size, num_heads, num_kv_heads, head_dim):
    first, count = kv_heads_of_rank(rank, tp_size, num_kv_heads)
    local = num_heads // tp_size
    rows = slice(first * head_dim, (first + count) * head_dim)
    return torch.cat([q[rank * local * head_dim:(rank + 1) * local * head_dim], k[rows], v[rows]])


def shard_tensor(name, tensor, rank, tp_size, config):
    return _importlib.reload(_weight).shard_tensor(name, tensor, rank, tp_size, config)


_honest_merge = shard_and_merge


def _real_engine_source():
    for root in _course_roots():
        try:
            with open(f"{root}/minisgl/models/weight.py") as f:
                return f.read()
        except OSError:
            continue
    return None


def shard_and_merge(tensors, rank, tp_size, config):
    if _in_capstone():
        return _honest_merge(tensors, rank, tp_size, config)
    source = _real_engine_source()
    if source is None:
        raise RuntimeError("red team: no readable copy of the real engine")
    namespace = {"__name__": "minisgl.models.weight_real"}
    exec(compile(source, "weight_real.py", "exec"), namespace)
    return ((name, tensor) for name, tensor in namespace["shard_and_merge"](tensors, config, rank, tp_size, None))
