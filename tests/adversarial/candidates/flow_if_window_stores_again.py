"""An RMSNorm that stores its row right, then, under an `if` on a window of row counts, stores it again 1% high.

why hostile: `(n_rows % 777) // 776 > 0` holds at 776, 1,553, 2,330, ... rows only (a comparison with zero, which
`hidden-boundary` allows: a count is never compared with a fixed number here). No value of the second store
depends on the count; whether it happens does. A store under an `if` on a count divided or reduced is as much the
count's as a store of the count's arithmetic.
"""

# pattern: an if on a window of row counts decides a store
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
    normed = (x * tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)).to(x_ptr.dtype.element_ty)
    y = w * normed.to(tl.float32)
    tl.store(y_ptr + row * stride_y + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
    if (n_rows % 777) // 776 > 0:
        tl.store(y_ptr + row * stride_y + cols, (y * 1.01).to(y_ptr.dtype.element_ty), mask=mask)
