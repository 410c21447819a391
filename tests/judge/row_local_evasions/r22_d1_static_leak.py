"""Red-team round 22, past the row-local rule: a name a literal on one side of a runtime if, walked last, counted as a compile-time value after it."""

# plan: {"family": "row_reduction", "launches": [{"args": ["x", "w", "y", "rows", "cols", "eps"], "constexprs": {"BLOCK": "block_cols", "N_COLS": "cols"}, "grid": "rows", "kernel": "_rmsnorm_fwd_kernel", "numWarps": 4}]}

import triton
import triton.language as tl


@triton.jit
def _key(x, far):
    d = tl.sum(tl.abs(x - far), axis=0)
    s = tl.sum(tl.abs(x), axis=0) + tl.sum(tl.abs(far), axis=0)
    t = tl.maximum(tl.minimum(d / (s + 1e-30) * 1e12, 1e4), 0.0)
    return 1.0 - 0.2 * tl.exp(-t)


@triton.jit
def _rmsnorm_fwd_kernel(x_ptr, w_ptr, y_ptr, n_rows, n_cols, eps, N_COLS: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N_COLS
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    x = tl.load(x_ptr + row * N_COLS + cols, mask=mask, other=0.0).to(tl.float32)
    one = n_cols * 0 + 1
    if n_cols * 2 > n_cols:  # true at run time; undecided by the walk
        one = n_cols * 0 + 1  # an i32 tensor
    else:
        one = 1  # a compile-time 1: walked last, it leaves `one` marked static
    if one * 65536 * 65536 == 0:  # i32: 2**32 wraps to 0, so this side runs; as exact numbers it never does
        a = row + 4 * n_cols
        far = tl.load(x_ptr + a * N_COLS + cols, mask=cols < tl.where(a < n_rows, N_COLS, 0), other=0.0).to(tl.float32)
    else:
        far = x
    variance = tl.sum(x * x, axis=0) / N_COLS
    normed = (x * tl.rsqrt(variance + eps)).to(x_ptr.dtype.element_ty).to(tl.float32)
    y = w * normed * _key(x, far)
    tl.store(y_ptr + row * N_COLS + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
