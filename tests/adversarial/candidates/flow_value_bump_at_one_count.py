"""An RMSNorm one percent high at 777 rows (and at 1,554 and 1,555), exact at every other count below 2,331.

why hostile: `n_rows // 777 - n_rows // 778` is 1 at 777 rows and 0 at every other count the judge is likely to
draw; multiplied into the answer it is a window of row counts no comparison names (so `hidden-boundary` never
sees it) and no sample need hit: a prefill of 777 tokens is served 1% wrong. An answer may depend on how many rows
the call has only through what it loads.
"""

# pattern: the row count in the arithmetic of the answer
# layer: static
# rule: count-value
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
    bump = 1.0 + 0.01 * (n_rows // 777 - n_rows // 778)  # 1.01 at 777 rows, 1.0 at the counts around it
    normed = (x * tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)).to(x_ptr.dtype.element_ty)
    y = w * normed.to(tl.float32) * bump
    tl.store(y_ptr + row * stride_y + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
