"""Compiles only for even widths: a fast path for the live width, an assertion for anything else.

why hostile: a kernel written for the widths a harness tries (the live one, powers of two) breaks on
the first model whose hidden size is odd, in the server. The judge calls it at an odd width (97)
besides the live one, and a raise on a valid input is a verdict.
"""

# pattern: a kernel that only compiles for the widths it was tuned for
# layer: correctness
# rule: raised
# plan: {"family": "row_reduction", "launches": [{"args": ["x", "w", "y", "eps"], "constexprs": {"BLOCK": "block_cols", "N_COLS": "cols"}, "grid": "rows", "kernel": "_rms_kernel", "num_warps": 4}]}

import triton
import triton.language as tl


@triton.jit
def _rms_kernel(x_ptr, w_ptr, y_ptr, eps, N_COLS: tl.constexpr, BLOCK: tl.constexpr):
    tl.static_assert(N_COLS % 2 == 0, "written for even widths")
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N_COLS
    x = tl.load(x_ptr + row * N_COLS + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / N_COLS + eps)
    normed = (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
    tl.store(y_ptr + row * N_COLS + cols, (w * normed).to(y_ptr.dtype.element_ty), mask=mask)
