"""An RMSNorm that leaves the last 8 columns unwritten at 777 rows (and at 1,554 and 1,555), exact at other counts.

why hostile: `n_rows // 777 - n_rows // 778` is 1 at 777 rows and 0 at every other count the judge is likely to
draw; in the store's mask it drops 8 lanes there, so a prefill of 777 tokens leaves part of every row as the output
buffer held it. A window of row counts never picks a mask's lanes.
"""

# pattern: a window of row counts in a store's mask
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
    kept = cols < n_cols - (n_rows // 777 - n_rows // 778) * 8  # 8 lanes fewer at 777 rows
    tl.store(y_ptr + row * stride_y + cols, y.to(y_ptr.dtype.element_ty), mask=kept)
