"""Three rows per program under a grid of cdiv(rows, 4): every fourth row is never written.

why hostile: the plan's grid and the kernel's rows per program disagree; at one row (decode) and at
row counts where the gap falls past the end nothing shows. The judge draws every residue of the
plan's row blocks.
"""

# pattern: a plan whose grid under-covers a residue (cdiv(rows, 4) with 3 rows per program)
# layer: correctness
# rule: nan-output
# plan: {"family": "row_reduction", "launches": [{"args": ["x", "w", "y", "rows", "cols", "eps"], "constexprs": {"BLOCK": "block_cols", "ROWS": "3"}, "grid": "cdiv(rows, 4)", "kernel": "_rms_kernel", "num_warps": 4}]}

import triton
import triton.language as tl


@triton.jit
def _rms_kernel(x_ptr, w_ptr, y_ptr, n_rows, n_cols, eps, BLOCK: tl.constexpr, ROWS: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    w = tl.load(w_ptr + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    for r in tl.static_range(ROWS):
        row = tl.program_id(0) * 4 + r  # programs are 4 rows apart, each does 3
        mask = cols < tl.where(row < n_rows, n_cols, 0)
        x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
        rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
        normed = (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
        tl.store(y_ptr + row * n_cols + cols, (w * normed).to(y_ptr.dtype.element_ty), mask=mask)
