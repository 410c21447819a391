"""Selects a wrong value for elements in a narrow band, through tl.where rather than an if.

why hostile: the same band trick without a branch: a select whose condition tests the loaded value against two
thresholds. The dataflow check admits a tl.where on data only as a sign split (`x < 0`), the shape of an
activation; a comparison with any other threshold is a band some inputs fall in.
"""

# pattern: a tl.where band on loaded values
# layer: static
# rule: value-branch
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
    x = tl.where((x > 2.25) & (x < 2.5), 0.0, x)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    normed = (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
    tl.store(y_ptr + row * n_cols + cols, (w * normed).to(y_ptr.dtype.element_ty), mask=mask)
