"""The honest Triton RMSNorm with a loop that is bounded and does nothing, of rows x rows / 8 steps a program.

Every loop bound is shape arithmetic and nothing the loop carries reaches the answer, so the static check lets it
through; the short canary parity runs (a few rows) takes microseconds of it, a prefill of 400 rows runs for seconds
under the interpreter: the kernel the server's per-call limit is for (tests/server/test_live_call_limit.py).
"""

# plan: {"family": "row_reduction", "launches": [{"args": ["x", "w", "y", "rows", "x_row_stride", "y_row_stride", "cols", "eps"], "constexprs": {"BLOCK": "block_cols"}, "grid": "rows", "kernel": "_rmsnorm_slow_long", "num_warps": 4}]}

import triton
import triton.language as tl


@triton.jit
def _rmsnorm_slow_long(x_ptr, w_ptr, y_ptr, n_rows, stride_x, stride_y, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    variance = tl.sum(x * x, axis=0) / n_cols
    spin = 0.0
    for _ in range(0, n_rows * n_rows // 8):
        spin = spin + 1.0  # counts the iterations and goes nowhere
    normed = (x * (1.0 / tl.sqrt(variance + eps))).to(x_ptr.dtype.element_ty)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    y = w.to(tl.float32) * normed.to(tl.float32)
    tl.store(y_ptr + row * stride_y + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
