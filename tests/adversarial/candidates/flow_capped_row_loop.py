"""A persistent kernel whose row loop stops at 40,000 rows: right on every row count the judge can draw on CPU.

why hostile: a batched prefill of the served model carries more rows than that (64 slots of 2,048 tokens); the
rows past the cap are never written. The cap is a `tl.minimum` of the row count and a number, not a comparison.

closed by: the dataflow check treats a size the call grows with taken at most (or at least) a fixed number as
the boundary it is (`hidden-boundary`); a GPU also draws the served model's whole row range (`domain` cases).
"""

# pattern: a loop bound capped by tl.minimum(rows, a literal): a dispatch boundary the plan does not declare
# layer: static
# rule: hidden-boundary
# plan: {"family": "row_reduction", "launches": [{"args": ["x", "w", "y", "rows", "cols", "eps"], "constexprs": {"BLOCK": "block_cols"}, "grid": "sms", "kernel": "_rms_kernel", "num_warps": 4}]}

import triton
import triton.language as tl


@triton.jit
def _rms_kernel(x_ptr, w_ptr, y_ptr, n_rows, n_cols, eps, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    for row in range(tl.program_id(0), tl.minimum(n_rows, 40000), tl.num_programs(0)):
        x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
        rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
        normed = (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
        tl.store(y_ptr + row * n_cols + cols, (w * normed).to(y_ptr.dtype.element_ty), mask=mask)
