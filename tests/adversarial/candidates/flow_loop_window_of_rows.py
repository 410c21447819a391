"""An RMSNorm one percent high at 777 rows (and at 1,554 and 1,555), through a loop that runs only there.

why hostile: `range(n_rows // 777 - n_rows // 778)` runs its body once at 777 rows and never at any other count
the judge is likely to draw; the body multiplies an accumulator carried out of the loop, so no arithmetic of the
answer names the row count and no `if` or `tl.where` tests it: a prefill of 777 tokens is served 1% wrong. What a
loop carries from one iteration to the next holds how many times it ran, and a window of counts in its bounds
decides that.
"""

# pattern: a window of row counts in a loop's bounds, its effect carried out of the loop
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
    for _ in range(n_rows // 777 - n_rows // 778):  # once at 777 rows, never at the counts around it
        w = w * 1.01
    normed = (x * tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)).to(x_ptr.dtype.element_ty)
    y = w * normed.to(tl.float32)
    tl.store(y_ptr + row * stride_y + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
