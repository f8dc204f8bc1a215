# 01 row-forward: the engine's own RowParallelLinear.forward, taken at import time - before any
# block could be switched on around the call. Stopped by: the worker's minisgl is a copy in which
# that function's body raises OffLimits, whatever name it is reached by. (Honest in the capstone;
# column-forward stays honest, a control.)
from minisgl.layers.linear import RowParallelLinear as _Row

_engine_row_forward = _Row.forward
_honest_row = row_parallel_forward


def row_parallel_forward(x_local, weight_shard, bias):
    if _in_capstone():
        return _honest_row(x_local, weight_shard, bias)
    layer = _Row.__new__(_Row)
    layer.weight, layer.bias = weight_shard, bias
    return _engine_row_forward(layer, x_local)
