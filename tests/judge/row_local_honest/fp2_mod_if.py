"""Honest (red-team round 18, a style the row-local rule must pass): an if on a remainder inside the kernel."""

# plan: {"family": "row_reduction", "launches": [{"kernel": "_rmsnorm_fwd_kernel", "args": ["x", "w", "y", "rows", "cols", "x_row_stride", "y_row_stride", "eps"], "constexprs": {"BLOCK": "block_cols", "R": "8"}, "grid": "cdiv(rows, 8)", "numWarps": 4}]}

# plan: {"family": "row_reduction", "launches": [{"kernel": "_rmsnorm_fwd_kernel", "args": ["x", "w", "y", "rows", "cols", "x_row_stride", "y_row_stride", "eps"], "constexprs": {"BLOCK": "block_cols", "R": "8"}, "grid": "cdiv(rows, 8)", "numWarps": 4}]}

import triton
import triton.language as tl


@triton.jit
def _tile(base, rows, cols, stride):
    return base + rows[:, None].to(tl.int64) * stride + cols[None, :]


@triton.jit
def _rmsnorm_fwd_kernel(
    x_ptr, w_ptr, y_ptr, n_rows, n_cols, stride_x, stride_y, eps, BLOCK: tl.constexpr, R: tl.constexpr
):
    rows = tl.program_id(0) * R + tl.arange(0, R)
    cols = tl.arange(0, BLOCK)
    if R % 2 == 0:
        pass
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    x = tl.load(_tile(x_ptr, rows, cols, stride_x), mask=mask, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=1) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    y = w[None, :] * (x * rstd[:, None]).to(x_ptr.dtype.element_ty).to(tl.float32)
    tl.store(_tile(y_ptr, rows, cols, stride_y), y.to(y_ptr.dtype.element_ty), mask=mask)
