"""Red-team round 21 (a known gap): constexprs' float defaults read as exact numbers: `int(BIG + THREE - BIG - THREE)` with BIG = 2.0**53 and THREE = 3.0 is 0 in exact fractions, 1 at run time."""

# plan: {"family": "row_reduction", "launches": [{"kernel": "_rmsnorm_fwd_kernel", "args": ["x", "w", "y", "rows", "cols", "eps"], "constexprs": {"BLOCK": "block_cols", "N_COLS": "cols"}, "grid": "rows", "numWarps": 4}]}

import triton
import triton.language as tl


@triton.jit
def _key(x, far):
    d = tl.sum(tl.abs(x - far), axis=0)
    s = tl.sum(tl.abs(x), axis=0) + tl.sum(tl.abs(far), axis=0)
    t = tl.maximum(tl.minimum(d / (s + 1e-30) * 1e12, 1e4), 0.0)
    return 1.0 - 0.2 * tl.exp(-t)


@triton.jit
def _rmsnorm_fwd_kernel(
    x_ptr,
    w_ptr,
    y_ptr,
    n_rows,
    n_cols,
    eps,
    N_COLS: tl.constexpr,
    BLOCK: tl.constexpr,
    BIG: tl.constexpr = 9007199254740992.0,
    THREE: tl.constexpr = 3.0,
):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N_COLS
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    x = tl.load(x_ptr + row * N_COLS + cols, mask=mask, other=0.0).to(tl.float32)
    variance = tl.sum(x * x, axis=0) / N_COLS
    normed = (x * tl.rsqrt(variance + eps)).to(x_ptr.dtype.element_ty).to(tl.float32)
    ahead = row + int(BIG + THREE - BIG - THREE) * (4 * n_cols)
    far = tl.load(x_ptr + ahead * N_COLS + cols, mask=cols < tl.where(row + 4 * n_cols < n_rows, N_COLS, 0), other=0.0)
    y = w * normed * _key(x, far.to(tl.float32))
    tl.store(y_ptr + row * N_COLS + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
