"""An RMSNorm that leaves one row unwritten at row counts that are multiples of 77,777: exact at every other count.

why hostile: `row * 77777 != n_rows * 77776` is false for one row only, and only where 77,777 divides the row count
(a prefill of 77,777 tokens, or 155,554 rows): that row keeps whatever the output's memory held. No constant is
compared with the row alone, and no count is divided: `hidden-boundary` and `count-window` do not see it. A CPU's
sample of programs runs row 77,776 only if it draws it, and a GPU's whole range only if it draws such a count.

closed by: `row-pick`: which row is compared only as a bound (<, <=, >, >=), never by equality.
"""

# pattern: one row singled out by an equality of the row with a multiple of the count
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
    if row * 77777 != n_rows * 77776:  # row 77,776 of 77,777 rows (and its multiples) is never written
        tl.store(y_ptr + row * stride_y + cols, y, mask=mask)
