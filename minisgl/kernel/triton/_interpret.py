"""Make Triton's CPU interpreter (TRITON_INTERPRET=1) run our kernels under NumPy 2 (chapter 10 runs
them there).

The interpreter keeps every scalar as a one-element array, and a loop bound such as
`range(start, seq_len, BLOCK)` turns it into a Python int with `int(array)`, which NumPy 2 refuses
for arrays of one dimension. We convert through the array's single element instead.
"""

from __future__ import annotations


def patch_interpreter_scalars() -> None:
    from triton.runtime import interpreter

    original = interpreter._patch_lang_tensor
    if getattr(original, "_minisgl_patched", False):
        return

    def patched(tensor, scope) -> None:
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    patched._minisgl_patched = True
    interpreter._patch_lang_tensor = patched
