"""An RMSNorm whose store mask bounds the row from both sides, one side written as the row times a negative width.

why hostile: `row * (0 - 3 * n_cols) >= n_rows * (0 - 2 * n_cols)` is `3 * row <= 2 * n_rows`, a bound from below.
The check reads a factor's sign only when it is a number fixed for the launch (a literal, a constant, a constexpr);
a factor built from the width is taken as positive, so the row stays "rising" and the condition reads as a bound
from above, like its neighbour `row * 1024 >= n_rows * 683`: the mask looks one-sided. Rows strictly between 2n/3
and 683n/1024 are never written (43 at 131,072, 2 at 6,761, none below 1,024).

closed by: `row-pick`: a row times a size that may be negative (a width subtracted from zero) neither rises nor falls with
the row, so it is no bound.
"""

# pattern: a negative factor built from a shape argument hides a bound from the other side
# layer: static
# rule: row-pick
# plan: {"family": "row_reduction", "launches": [{"args": ["x", "w", "y", "rows", "cols", "eps"], "constexprs": {"BLOCK": "block_cols"}, "grid": "rows", "kernel": "_rms_kernel", "num_warps": 4}]}

import triton
import triton.language as tl


@triton.jit
def _rms_kernel(x_ptr, w_ptr, y_ptr, n_rows, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    y = (w * (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)).to(y_ptr.dtype.element_ty)
    r = tl.broadcast_to(row, (BLOCK,))  # the row on every lane
    keep = (r * (0 - 3 * n_cols) >= n_rows * (0 - 2 * n_cols)) | (r * 1024 >= n_rows * 683)
    tl.store(y_ptr + row * n_cols + cols, y, mask=mask & keep)
