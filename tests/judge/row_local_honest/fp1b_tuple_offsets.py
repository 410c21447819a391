"""Honest (red-team round 18, a style the row-local rule must pass): a helper kernel returning (offsets, mask), unpacked by its caller."""

# plan: {"family": "row_reduction", "launches": [{"kernel": "_rmsnorm_fwd_kernel", "args": ["x", "w", "y", "rows", "cols", "x_row_stride", "y_row_stride", "eps"], "constexprs": {"BLOCK": "block_cols", "R": "8"}, "grid": "cdiv(rows, 8)", "numWarps": 4}]}

# plan: {"family": "row_reduction", "launches": [{"kernel": "_rmsnorm_fwd_kernel", "args": ["x", "w", "y", "rows", "cols", "x_row_stride", "y_row_stride", "eps"], "constexprs": {"BLOCK": "block_cols", "R": "8"}, "grid": "cdiv(rows, 8)", "numWarps": 4}]}

import triton
import triton.language as tl


@triton.jit
def _tile(rows, cols, stride, n_rows, n_cols):
    return rows[:, None].to(tl.int64) * stride + cols[None, :], (rows[:, None] < n_rows) & (cols[None, :] < n_cols)


@triton.jit
def _rmsnorm_fwd_kernel(
    x_ptr, w_ptr, y_ptr, n_rows, n_cols, stride_x, stride_y, eps, BLOCK: tl.constexpr, R: tl.constexpr
):
    rows = tl.program_id(0) * R + tl.arange(0, R)
    cols = tl.arange(0, BLOCK)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    xo, xm = _tile(rows, cols, stride_x, n_rows, n_cols)
    x = tl.load(x_ptr + xo, mask=xm, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=1) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    y = w[None, :] * (x * rstd[:, None]).to(x_ptr.dtype.element_ty).to(tl.float32)
    yo, ym = _tile(rows, cols, stride_y, n_rows, n_cols)
    tl.store(y_ptr + yo, y.to(y_ptr.dtype.element_ty), mask=ym)
