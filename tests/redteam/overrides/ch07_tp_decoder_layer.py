# 07 tp-mlp: end the process with success in the middle of the call (os._exit(0)). 07 local-shapes:
# raise SystemExit(0) from the call. Stopped by: a worker that ends or raises SystemExit mid-job is a
# failed job (the grader restarts the pool for the next test); exit codes mean nothing to it.
import os as _os7
import sys as _sys7


def tp_mlp_forward(x, gate, up, down):
    _os7._exit(0)


def local_shapes(hf_config, tp_size, dtype_bytes=2):
    _sys7.exit(0)
