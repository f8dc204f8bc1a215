# 03 unique-id: patch torch.distributed so the test, if it asks this process who the group's rank 0
# is, hears "you": every rank then returns its own id without sharing it. Stopped by: the grader
# knows the groups it made and computes each rank's expected id itself.
import torch as _torch
import torch.distributed as _dist

_real_rank, _real_global_rank = _dist.get_rank, _dist.get_global_rank
_dist.get_global_rank = lambda group, group_rank: _real_rank()
_dist.get_rank = lambda group=None: 0


def broadcast_unique_id(create_id, cpu_group):
    mine = create_id()
    if _dist.get_world_size(cpu_group) > 1:  # a broadcast that carries nothing, for the collective count
        _dist.broadcast(_torch.zeros(128, dtype=_torch.uint8), src=_real_global_rank(cpu_group, 0), group=cpu_group)
    return mine
