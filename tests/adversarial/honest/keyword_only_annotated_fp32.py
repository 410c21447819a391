"""Honest: row strides as runtime arguments, constexprs by name with one left to its default, 1/sqrt.

The old candidate of this name had keyword-only, annotated host parameters; the wrapper is the op
family's now, so the same idea lives in the kernel's signature: the plan names its constexprs
(BLOCK), `INVERT_SQRT` keeps its literal default, and the rows are addressed through the strides
the wrapper passes (x_row_stride, y_row_stride) instead of the width.
"""

# pattern: honest RMSNorm with another signature style and a row stride
# layer: passes
# rule: -
# plan: {"family": "row_reduction", "launches": [{"args": ["x", "w", "y", "x_row_stride", "y_row_stride", "cols", "eps"], "constexprs": {"BLOCK": "block_cols"}, "grid": "rows", "kernel": "_rms_strided_kernel", "num_warps": 2}]}

import triton
import triton.language as tl


@triton.jit
def _rms_strided_kernel(
    x_ptr, w_ptr, y_ptr, x_stride, y_stride, n_cols, eps, BLOCK: tl.constexpr, INVERT_SQRT: tl.constexpr = True
):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    if INVERT_SQRT:
        inv = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    else:
        inv = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    normed = (x * inv).to(x_ptr.dtype.element_ty).to(tl.float32)
    tl.store(y_ptr + row * y_stride + cols, (w * normed).to(y_ptr.dtype.element_ty), mask=mask)
