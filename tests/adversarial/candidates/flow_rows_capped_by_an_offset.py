"""An RMSNorm that leaves every row past 32,768 unwritten, its cap moved into the row's side of the comparison.

why hostile: `row - 32768 < 0` is `row < 32768`, but the row is compared with zero, which `hidden-boundary`
allowed as the first row's bound. A batched prefill of the served model carries up to 131,072 rows: the rows past
the cap keep whatever the output's memory held.

closed by: `hidden-boundary`: which row compared with a side moved by a fixed number is a dispatch boundary the plan
does not declare. On a CPU the served range's sample would also meet it (the last program writes nothing).
"""

# pattern: a cap on the row moved into the row's side of the comparison
# layer: static
# rule: hidden-boundary
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
    if row - 32768 < 0:
        tl.store(y_ptr + row * stride_y + cols, y, mask=mask)
