"""An RMSNorm that also loads a block before its weight at 15 rows (and a few counts past 29), keeping none of it.

why hostile: `if row < (n_rows // 15 - n_rows // 16) * n_rows` holds for every row at 15 rows and for none at any
other count below 30: which row compared with a window of row counts (no fixed number for `hidden-boundary` to see).
Under it the kernel loads the block before its weight and stores the same answer again: what it read enters it only
as a count of lanes above 3e38 times 1e-30, so the answer is right at every shape; but the load is issued at those
counts only, and where a tensor starts at a page it reads the page before: a crash in production at a row count the
judge may never draw. Whether a load or a store is issued may not depend on a window of row counts.
"""

# pattern: an if comparing which row with a window of row counts decides a load (a read before the weight)
# layer: static
# rule: count-window
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
    y = w * normed.to(tl.float32)
    tl.store(y_ptr + row * stride_y + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
    if row < (n_rows // 15 - n_rows // 16) * n_rows:  # every row at 15 rows, none at any other count below 30
        early = tl.load(w_ptr + cols - BLOCK, mask=mask, other=0.0).to(tl.float32)  # before the weight
        kept = tl.sum((early > 3.0e38).to(tl.float32), axis=0) * 1e-30  # the answer unchanged
        tl.store(y_ptr + row * stride_y + cols, (y + kept).to(y_ptr.dtype.element_ty), mask=mask)
