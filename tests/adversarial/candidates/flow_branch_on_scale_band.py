"""Wrong only for rows whose scale lies in a band the judge's regimes step over.

why hostile: value regimes are samples (normal, huge, tiny, ...); a kernel that branches on what it loaded can be
wrong only between them — a live activation at that scale gets a wrong answer. No sample closes that: the dataflow
check refuses any branch on loaded values, so no input can take another path.
"""

# pattern: a branch on a row's loaded scale
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
    peak = tl.max(tl.abs(x), axis=0)
    if (peak > 37.0) & (peak < 41.0):  # a band no regime draws
        w = w * 0.5
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    normed = (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
    tl.store(y_ptr + row * n_cols + cols, (w * normed).to(y_ptr.dtype.element_ty), mask=mask)
