"""RMSNorm, one row a program: a helper gives the row's x and y pointers as a pair (red-team round 15; the dataflow check joined the pair, read y as loaded and x as stored, until a helper's tuple was unpacked part by part)."""

# plan: {"family": "row_reduction", "launches": [{"args": ["x", "w", "y", "rows", "eps"], "constexprs": {"BLOCK": "block_cols", "N_COLS": "cols"}, "grid": "rows", "kernel": "_rmsnorm_fwd_kernel", "numWarps": 4}]}

import triton
import triton.language as tl


@triton.jit
def _row_ptrs(x_ptr, y_ptr, row, N_COLS: tl.constexpr):
    return x_ptr + row * N_COLS, y_ptr + row * N_COLS


@triton.jit
def _rmsnorm_fwd_kernel(x_ptr, w_ptr, y_ptr, n_rows, eps, N_COLS: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N_COLS
    x_row, y_row = _row_ptrs(x_ptr, y_ptr, row, N_COLS)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
    variance = tl.sum(x * x, axis=0) / N_COLS
    normed = (x * tl.rsqrt(variance + eps)).to(x_ptr.dtype.element_ty).to(tl.float32)
    tl.store(y_row + cols, (w * normed).to(y_ptr.dtype.element_ty), mask=mask)
