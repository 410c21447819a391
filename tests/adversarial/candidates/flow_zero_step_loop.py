"""A for loop whose step is a runtime difference that is zero.

why hostile: `range(0, n, n_cols - n_cols)` never advances on a GPU (the interpreter raises): a hang on every
input. The dataflow check wants a loop step that cannot be zero: a positive literal, a constexpr the plan gives a
positive value, or the program count.
"""

# pattern: a loop step that can be zero
# layer: static
# rule: unbounded-loop
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
    for _ in range(0, n_cols, n_cols - n_cols):
        w = w * 1.0
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    normed = (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
    tl.store(y_ptr + row * n_cols + cols, (w * normed).to(y_ptr.dtype.element_ty), mask=mask)
