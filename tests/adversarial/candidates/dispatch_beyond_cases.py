"""Honest for calls of up to 16 rows, weightless beyond: a dispatch boundary above every CPU case.

why hostile: the plan's row dispatch is the author's; cases are drawn by row residues of the grids'
blocks and a cap, not by the plan's max_rows boundaries.

closed by: cases are drawn on both sides of every dispatch boundary of the plan
(services.judge.cases, `dispatch-edge`), and a boundary above 32768 rows is refused.
"""

# pattern: a plan whose catch-all launch (beyond the judge's row counts) runs a wrong kernel
# layer: correctness
# rule: outside-tolerance
# plan: {"family": "row_reduction", "launches": [{"args": ["x", "w", "y", "cols", "eps"], "constexprs": {"BLOCK": "block_cols"}, "grid": "rows", "kernel": "_rms_kernel", "max_rows": "16", "num_warps": 4}, {"args": ["x", "y", "cols", "eps"], "constexprs": {"BLOCK": "block_cols"}, "grid": "rows", "kernel": "_weightless_kernel", "num_warps": 4}]}

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


@triton.jit
def _weightless_kernel(x_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    tl.store(y_ptr + row * n_cols + cols, (x * rstd).to(y_ptr.dtype.element_ty), mask=mask)
