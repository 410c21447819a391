"""Stores nothing (its store mask is off by a block), so the output is whatever memory held.

why hostile: torch.empty often returns the block the reference just freed, which holds the right
answer in a harness that runs the reference first. The judge computes references in another process,
and the wrapper's output is allocated fresh and filled with NaN (inside guard bytes) for every call.
"""

# pattern: uninitialised memory that happens to hold the reference's freed output
# layer: static
# rule: row-local
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
    store_mask = cols < n_cols - BLOCK  # "off by a block": never true, nothing is written
    tl.store(y_ptr + row * n_cols + cols, (w * normed).to(y_ptr.dtype.element_ty), mask=store_mask)
