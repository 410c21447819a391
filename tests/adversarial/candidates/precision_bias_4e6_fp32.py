"""Scales every fp32 output by 1 + 4e-6: inside the elementwise bound (~7.7e-6 at width 64), a bias all the same.

why hostile: each element alone is as close as an honest kernel's rounding allows, so an elementwise
bound passes it; but round-to-nearest is unbiased, and the mean signed error of a whole case (~4e-6
here) is far beyond what rounding explains (under 1e-6). Skipped work or a cheaper approximation
often shows only as such a bias.
"""

# pattern: a 4e-6 relative bias in fp32, inside the elementwise bound
# layer: correctness
# rule: biased-output
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
    tl.store(y_ptr + row * n_cols + cols, (w * normed * 1.000004).to(y_ptr.dtype.element_ty), mask=mask)
