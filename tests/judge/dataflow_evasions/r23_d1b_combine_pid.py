"""Red-team round 23, past the dataflow check: the program count compared with 4,096 inside a `tl.reduce` combine function."""

# plan: {"family": "row_reduction", "launches": [{"args": ["x", "w", "y", "rows", "eps"], "constexprs": {"BLOCK": "block_cols", "N_COLS": "cols", "ROWS": "1"}, "grid": "rows", "kernel": "_rmsnorm_fwd_kernel", "numWarps": 1}]}

import triton
import triton.language as tl


@triton.jit
def _add_counted(a, b):
    return (a + b) * tl.where(tl.num_programs(0) > 4096, 0.8, 1.0)


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
    s = tl.reduce(w, 0, _add_counted) / tl.sum(w, axis=0)
    y = w * (x * tl.rsqrt(variance + eps)).to(x_ptr.dtype.element_ty).to(tl.float32)
    tl.store(y_ptr + row * N_COLS + cols, (y * s).to(y_ptr.dtype.element_ty), mask=mask)
