"""Honest (red-team rounds 14-16, a style the row-local rule must pass): x read by its row stride, y written by the width (a fresh contiguous output)."""

# plan: {"family": "row_reduction", "launches": [{"kernel": "_rmsnorm_fwd_kernel", "args": ["x", "w", "y", "x_row_stride", "cols", "eps"], "constexprs": {"BLOCK": "block_cols"}, "grid": "rows", "numWarps": 4}]}

import triton
import triton.language as tl


@triton.jit
def _rmsnorm_fwd_kernel(x_ptr, w_ptr, y_ptr, stride_x, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    y = w * (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
    tl.store(y_ptr + row * n_cols + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
