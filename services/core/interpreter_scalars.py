"""Make the Triton CPU interpreter turn a scalar tensor into a Python int on every NumPy.

Under the interpreter a scalar (`tl.program_id`, `tl.num_programs`, an int argument) is a tensor whose
data is a NumPy array of shape (1,), and a kernel's plain `range(start, stop, step)` asks each bound for
`__index__`. Triton 3.6's interpreter answers with `int(data)`; NumPy 2.5 refuses to convert an array of
one dimension ("only 0-dimensional arrays can be converted to Python scalars"), so on that pairing every
persistent kernel (`range(pid, n_rows, tl.num_programs(0))`) raised: the template's own among them, under
the judge's fenced pass on a GPU machine. Later Tritons squeeze the array first; this does the same for
the earlier ones and changes nothing else. Idempotent.
"""

from __future__ import annotations

_PATCHED = "_yantra_index"


def install() -> bool:
    """Wrap the interpreter's tensor patching; False where this Triton has no interpreter to patch."""
    try:
        from triton.runtime import interpreter
    except ImportError:
        return False
    original = getattr(interpreter, "_patch_lang_tensor", None)
    if original is None:
        return False
    if getattr(original, _PATCHED, False):
        return True

    def patch_lang_tensor(tensor, scope, *args, **kwargs):
        original(tensor, scope, *args, **kwargs)
        # set after the interpreter's own: its scope restores both, newest first
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.squeeze()))

    setattr(patch_lang_tensor, _PATCHED, True)
    interpreter._patch_lang_tensor = patch_lang_tensor
    return True
