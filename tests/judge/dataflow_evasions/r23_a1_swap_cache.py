"""Red-team round 23, past the dataflow check: the output read as a cache through a tuple swap, `src, dst = dst, src`, walked as two assignments in a row (the second read the first's new value)."""

# plan: {"family": "row_reduction", "launches": [{"args": ["x", "w", "y", "rows", "eps"], "constexprs": {"BLOCK": "block_cols", "N_COLS": "cols", "ROWS": "1"}, "grid": "rows", "kernel": "_rmsnorm_fwd_kernel", "numWarps": 1}]}

import triton
import triton.language as tl


@triton.jit
def _rmsnorm_fwd_kernel(
    x_ptr,
    w_ptr,
    y_ptr,
    n_rows,
    eps,
    N_COLS: tl.constexpr,
    BLOCK: tl.constexpr,
    ROWS: tl.constexpr,
):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < tl.where(row < n_rows, N_COLS, 0)
    w = tl.load(w_ptr + cols, mask=cols < N_COLS, other=0.0).to(tl.float32)
    x = tl.load(x_ptr + row * N_COLS + cols, mask=mask, other=0.0).to(tl.float32)
    variance = tl.sum(x * x, axis=0) / N_COLS
    normed = (x * tl.rsqrt(variance + eps)).to(x_ptr.dtype.element_ty).to(tl.float32)
    fresh = w * normed
    src = y_ptr
    dst = x_ptr
    src, dst = dst, src  # at run time dst = y_ptr; the walk gives dst src's new value, x_ptr
    old = tl.load(dst + row * N_COLS + cols, mask=mask, other=0.0).to(tl.float32)
    keep = tl.zeros([BLOCK], dtype=tl.float32)
    old, keep = keep, old  # keep = what y held
    y = tl.where(keep == keep, keep, fresh)  # a stale answer wherever the buffer holds a number
    tl.store(y_ptr + row * N_COLS + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
