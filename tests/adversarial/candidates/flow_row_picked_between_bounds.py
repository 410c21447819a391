"""An RMSNorm whose store mask leaves one row unwritten at row counts that are multiples of 77,777.

why hostile: `(row * 77777 < n_rows * 77776) | (row * 77777 > n_rows * 77776)` is two bounds, each an honest-looking
`row < count` check, from both sides: together they hold for every row but one, and that one only where 77,777
divides the row count. The row keeps whatever the output's memory held.

closed by: `row-pick`: one condition bounds which row from one side only.
"""

# pattern: one row singled out by two bounds from both sides in a mask
# layer: static
# rule: row-pick
# plan: {"family": "row_reduction", "launches": [{"args": ["x", "w", "y", "x_row_stride", "y_row_stride", "rows", "cols", "eps"], "constexprs": {"BLOCK": "block_cols"}, "grid": "rows", "kernel": "_rms_kernel", "num_warps": 4}]}

import triton
import triton.language as tl


@triton.jit
def _rms_kernel(x_ptr, w_ptr, y_ptr, stride_x, stride_y, n_rows, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    normed = (x * tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)).to(x_ptr.dtype.element_ty)
    y = (w * normed.to(tl.float32)).to(y_ptr.dtype.element_ty)
    left_out = (row * 77777 < n_rows * 77776) | (row * 77777 > n_rows * 77776)
    tl.store(y_ptr + row * stride_y + cols, y, mask=mask & left_out)
