"""Make the Triton CPU interpreter round fp32 -> bf16 to nearest even, as the GPU does.

Triton's interpreter (TRITON_INTERPRET=1; 3.x) converts fp32 to bf16 by dropping the low mantissa
bits: every bf16 cast and every store of fp32 values into a bf16 tensor rounds toward zero. An
honest kernel judged on CPU is then off by up to a whole bf16 ulp per cast and biased toward zero
(measured: a mean signed error of -1.4u over the template's two casts), which the judge's bound,
derived from round-to-nearest, rightly refuses. Compiled kernels round to nearest even. So where
kernels run interpreted (the judge's child on CPU, a CPU server), this cast is replaced by torch's
own round-to-nearest-even conversion; nothing else of the interpreter changes. Idempotent.
"""

from __future__ import annotations

_PATCHED = "_yantra_rtne"


def install() -> bool:
    """Patch the interpreter's cast; False where this Triton has no interpreter builder to patch."""
    try:
        from triton.runtime import interpreter
    except ImportError:
        return False
    builder = getattr(interpreter, "InterpreterBuilder", None)
    if builder is None or not hasattr(builder, "cast_impl"):
        return False
    if getattr(builder.cast_impl, _PATCHED, False):
        return True
    import numpy as np
    import torch
    import triton.language as tl

    original = builder.cast_impl

    def cast_impl(self, src, dst_type):
        if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16:
            rounded = torch.from_numpy(np.ascontiguousarray(src.data, dtype=np.float32)).to(torch.bfloat16)
            data = rounded.view(torch.int16).numpy().view(np.uint16).reshape(np.shape(src.data))
            return interpreter.TensorHandle(data, dst_type.scalar)
        return original(self, src, dst_type)

    setattr(cast_impl, _PATCHED, True)
    builder.cast_impl = cast_impl
    return True
