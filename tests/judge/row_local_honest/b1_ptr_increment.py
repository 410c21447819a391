"""Honest (red-team rounds 14-16, a style the row-local rule must pass): a persistent RMSNorm stepping its row pointers by the program count."""

# plan: {"family": "row_reduction", "launches": [{"kernel": "_rmsnorm_fwd_kernel", "args": ["x", "w", "y", "rows", "eps"], "constexprs": {"BLOCK": "block_cols", "N_COLS": "cols"}, "grid": "sms", "numWarps": 4}]}

import triton
import triton.language as tl


@triton.jit
def _rmsnorm_fwd_kernel(x_ptr, w_ptr, y_ptr, n_rows, eps, N_COLS: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    step = tl.num_programs(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N_COLS
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    x_row = x_ptr + pid * N_COLS
    y_row = y_ptr + pid * N_COLS
    for row in range(pid, n_rows, tl.num_programs(0)):
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        rstd = tl.rsqrt(tl.sum(x * x, axis=0) / N_COLS + eps)
        y = w * (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
        tl.store(y_row + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
        x_row += step * N_COLS
        y_row += step * N_COLS
