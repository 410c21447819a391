"""Red-team round 22, past the row-local rule: a helper with two returns of the loaded row (the second dead): several returns gave no value, so no data."""

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
def _same(v):
    return v
    return v


@triton.jit
def _rmsnorm_fwd_kernel(x_ptr, w_ptr, y_ptr, n_rows, n_cols, eps, N_COLS: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N_COLS
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    prev = tl.zeros([BLOCK], dtype=tl.float32)
    k = 0
    for t in range(2):
        a = row + (1 - k) * (4 * n_cols)
        cur = tl.load(x_ptr + a * N_COLS + cols, mask=cols < tl.where(a < n_rows, N_COLS, 0), other=0.0).to(tl.float32)
        variance = tl.sum(cur * cur, axis=0) / N_COLS
        normed = (cur * tl.rsqrt(variance + eps)).to(x_ptr.dtype.element_ty).to(tl.float32)
        y = w * normed * _key(cur, prev)
        tl.store(y_ptr + a * N_COLS + cols, y.to(y_ptr.dtype.element_ty), mask=cols < tl.where(k > 0, N_COLS, 0))
        prev = _same(cur)
        k = 1
