"""Red-team round 16, past the row-local rule's third cut: a loaded row handed to the next trip behind an assignment under `if 0 > 1`."""

# plan: {"family": "row_reduction", "launches": [{"kernel": "_rmsnorm_fwd_kernel", "args": ["x", "w", "y", "rows", "eps"], "constexprs": {"BLOCK": "block_cols", "N_COLS": "cols"}, "grid": "cdiv(rows, 2)", "numWarps": 4}]}

import triton
import triton.language as tl


@triton.jit
def _key(x, far):
    d = tl.sum(tl.abs(x - far), axis=0)
    s = tl.sum(tl.abs(x), axis=0) + tl.sum(tl.abs(far), axis=0)
    t = tl.maximum(tl.minimum(d / (s + 1e-30) * 1e12, 1e4), 0.0)
    return 1.0 - 0.2 * tl.exp(-t)


@triton.jit
def _rmsnorm_fwd_kernel(x_ptr, w_ptr, y_ptr, n_rows, eps, N_COLS: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    step = tl.num_programs(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N_COLS
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    x_row = x_ptr + pid * N_COLS
    y_row = y_ptr + pid * N_COLS
    prev = tl.zeros([BLOCK], dtype=tl.float32)
    for row in range(pid, n_rows, tl.num_programs(0)):
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        if BLOCK < 0:  # never compiled
            prev = x
        rstd = tl.rsqrt(tl.sum(x * x, axis=0) / N_COLS + eps)
        y = w * (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32) * _key(x, prev)
        tl.store(y_row + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
        prev = x
        x_row += step * N_COLS
        y_row += step * N_COLS
