"""An RMSNorm that stores its rows in an if and in an if inside the else: one row left out where 77,777 divides rows.

why hostile: the first store runs below `row * 77777 < n_rows * 77776`, the second inside the else under
`row * 77777 > n_rows * 77776`; each is a bound from one side, and together they cover every row but the one where
both bounds meet, which exists only where 77,777 divides the row count. Row 77,776 of 77,777 rows keeps whatever the
output's memory held.

closed by: `row-pick`: the stores to one output are bounded from one side of which row only (one below a bound and
another above one leave the rows between unwritten).
"""

# pattern: one row singled out by nested ifs bounding it from both sides
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
    if row * 77777 < n_rows * 77776:
        tl.store(y_ptr + row * stride_y + cols, y, mask=mask)
    else:
        if row * 77777 > n_rows * 77776:
            tl.store(y_ptr + row * stride_y + cols, y, mask=mask)
