# 11 match: sleep past every time limit. Stopped by: a job that does not answer in time is killed
# with its pool; after two hangs the task's remaining tests are not run, so the grade ends in time.
# 11 evict: a copy of the engine's RadixTree.evict code object, taken at import and called as a new
# function. Stopped by: the worker's minisgl is a copy where that code raises OffLimits.
import time as _time
import types as _types

from minisgl.kvcache.radix_tree import RadixTree as _Tree

_evict_code, _evict_globals = _Tree.evict.__code__, _Tree.evict.__globals__


def match_prefix(tree, token_ids):
    _time.sleep(3600)


def evict(tree, num_pages):
    return _types.FunctionType(_evict_code, _evict_globals)(tree, num_pages)
