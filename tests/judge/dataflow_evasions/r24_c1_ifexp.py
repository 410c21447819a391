"""Red-team round 24, past the dataflow check: the same combine function passed as a conditional expression."""

# plan: {"family": "row_reduction", "launches": [{"args": ["x", "w", "y", "rows", "eps"], "constexprs": {"BLOCK": "block_cols", "N_COLS": "cols", "ROWS": "1"}, "grid": "rows", "kernel": "_rmsnorm_fwd_kernel", "numWarps": 1}]}

import triton
import triton.language as tl


@triton.jit
def _add_once(a, b):
    return tl.where(a == b, a, a + b)


@triton.jit
def _total(v, combine):
    return tl.reduce(v, 0, combine)


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
    variance = tl.reduce(x * x, 0, _add_once if BLOCK > 0 else _add_once) / N_COLS
    y = w * (x * tl.rsqrt(variance + eps)).to(x_ptr.dtype.element_ty).to(tl.float32)
    tl.store(y_ptr + row * N_COLS + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
