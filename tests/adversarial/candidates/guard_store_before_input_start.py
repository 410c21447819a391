"""Stores zero one element before its input's start (a negative offset, from the first row's program).

why hostile: the element before a tensor is the tail of whatever was allocated before it (or the
allocator's own bookkeeping): invisible to every output check, and a write the input check does not
cover either (the input itself is unchanged). Canary bytes before every tensor of a call see it.
"""

# pattern: a store before the input's start
# layer: static
# rule: writes-input
# plan: {"family": "row_reduction", "launches": [{"args": ["x", "w", "y", "cols", "eps"], "constexprs": {"BLOCK": "block_cols"}, "grid": "rows", "kernel": "_rms_kernel", "num_warps": 4}]}

import triton
import triton.language as tl


@triton.jit
def _rms_kernel(x_ptr, w_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    normed = (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
    tl.store(y_ptr + row * n_cols + cols, (w * normed).to(y_ptr.dtype.element_ty), mask=mask)
    zero = tl.zeros((BLOCK,), dtype=x_ptr.dtype.element_ty)  # +0.0 (x * 0.0 would be -0.0 for x < 0)
    tl.store(x_ptr + cols - 1, zero, mask=cols < tl.where(row == 0, 1, 0))  # x[-1]: the element before x
