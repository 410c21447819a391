"""Honest: skips the masks when the width is exactly the block (a compile-time branch), masks otherwise.

The plan passes the width itself as a constexpr (N_COLS = "cols") beside the block ("block_cols"):
`N_COLS == BLOCK` is decided when the kernel compiles, so a power-of-two width gets loads and stores
without masks, any other width (the judge's odd width) the masked path.
"""

# pattern: honest RMSNorm with a compile-time fast path for power-of-two widths
# layer: passes
# rule: -
# plan: {"family": "row_reduction", "launches": [{"args": ["x", "w", "y", "eps"], "constexprs": {"BLOCK": "block_cols", "N_COLS": "cols"}, "grid": "rows", "kernel": "_rms_even_kernel", "num_warps": 4}]}

import triton
import triton.language as tl


@triton.jit
def _rms_even_kernel(x_ptr, w_ptr, y_ptr, eps, N_COLS: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    if N_COLS == BLOCK:
        x = tl.load(x_ptr + row * N_COLS + cols).to(tl.float32)
        w = tl.load(w_ptr + cols).to(tl.float32)
    else:
        x = tl.load(x_ptr + row * N_COLS + cols, mask=cols < N_COLS, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=cols < N_COLS, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / N_COLS + eps)
    y = (w * (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)).to(y_ptr.dtype.element_ty)
    if N_COLS == BLOCK:
        tl.store(y_ptr + row * N_COLS + cols, y)
    else:
        tl.store(y_ptr + row * N_COLS + cols, y, mask=cols < N_COLS)
