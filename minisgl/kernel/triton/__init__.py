"""Triton kernels of the attention path (chapter 10): store new K/V into the paged pool, paged
decode attention (split-K + merge), and prefill/extend attention over a cached prefix.

Importing this package needs `triton`. On a CPU, set TRITON_INTERPRET=1 before the import to run
the same kernels in Triton's interpreter (float32 only: the interpreter has no bf16 scalars).
"""

import os

if os.environ.get("TRITON_INTERPRET") == "1":
    from ._interpret import patch_interpreter_scalars

    patch_interpreter_scalars()

from .decode_attention import decode_attention  # noqa: E402
from .extend_attention import extend_attention  # noqa: E402
from .store_kv import store_kv  # noqa: E402

__all__ = ["decode_attention", "extend_attention", "store_kv"]
