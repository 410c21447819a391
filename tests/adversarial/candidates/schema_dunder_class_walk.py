"""Walks from a pointer argument to every loaded class: x_ptr.__class__.__mro__[-1].__subclasses__().

why hostile: under the interpreter the pointer is a Python object; its class leads to object, whose
subclasses include os._wrap_close and friends: a path to os.system that names no module at all.
"""

# pattern: a dunder attribute walk from a kernel argument (x.__class__ ...)
# layer: static
# rule: kernel-attribute
# plan: {"family": "row_reduction", "launches": [{"args": ["x", "w", "y", "cols", "eps"], "constexprs": {"BLOCK": "block_cols"}, "grid": "rows", "kernel": "_rms_kernel", "num_warps": 4}]}

import triton
import triton.language as tl


@triton.jit
def _rms_kernel(x_ptr, w_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    classes = x_ptr.__class__.__mro__[-1].__subclasses__()
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    normed = (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
    tl.store(y_ptr + row * n_cols + cols, (w * normed).to(y_ptr.dtype.element_ty), mask=mask & (classes is not None))
