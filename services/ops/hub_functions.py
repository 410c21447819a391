"""The Python function behind a modeling file's global, whatever transformers made of it.

transformers 5.25 depends on the `kernels` package, and with it installed `@use_kernel_forward_from_hub` turns a
decorated function (Qwen2's and Llama's `apply_rotary_pos_emb`) into an instance of a small `nn.Module` class whose
`forward` calls the function it closes over. The modeling code still calls the global, so replacing it swaps the op
as before; but recognising, judging and signing the op need the function itself.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable


def plain_function(obj) -> Callable | None:
    """`obj` when it is a Python function; the function a hub-kernel function module wraps; else None."""
    if inspect.isfunction(obj):
        return obj
    forward = getattr(type(obj), "forward", None)
    if obj is None or isinstance(obj, type) or not inspect.isfunction(forward) or not forward.__closure__:
        return None
    try:
        inner = inspect.getclosurevars(forward).nonlocals.get("func")
    except (TypeError, ValueError):
        return None
    return inner if inspect.isfunction(inner) else None
