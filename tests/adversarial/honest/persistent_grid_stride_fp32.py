"""Honest: one program per SM, each striding over the rows (a persistent kernel).

Grid "sms": as many programs as the device has SMs (4 under the interpreter), whatever the row
count; a program with no row left does nothing, one with several walks them `num_programs` apart.
The weight is loaded once per program.
"""

# pattern: honest RMSNorm, grid-stride loop over rows
# layer: passes
# rule: -
# plan: {"family": "row_reduction", "launches": [{"args": ["x", "w", "y", "rows", "cols", "eps"], "constexprs": {"BLOCK": "block_cols"}, "grid": "sms", "kernel": "_rms_persistent_kernel", "num_warps": 4}]}

import triton
import triton.language as tl


@triton.jit
def _rms_persistent_kernel(x_ptr, w_ptr, y_ptr, n_rows, n_cols, eps, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    for row in tl.range(tl.program_id(0), n_rows, tl.num_programs(0)):
        x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
        rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
        normed = (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
        tl.store(y_ptr + row * n_cols + cols, (w * normed).to(y_ptr.dtype.element_ty), mask=mask)
