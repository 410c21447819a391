"""An RMSNorm whose answer is scaled by 1.5 by a helper kernel, for the rows between a bound around its call and one
inside it.

why hostile: the kernel calls `_bump(y, row, n_rows)` under `if row * 1024 < 683 * n_rows:`, and `_bump` scales `y`
under `if row * 3 > 2 * n_rows:`. A helper's rows started unbounded (RoPE's k programs bound their tile's positions
inside one, from the other side of the bound around the call), so the two bounds were never joined. Rows strictly
between 2n/3 and 683n/1024 are 1.5x: 43 at 131,072, never met by a CPU's sample of programs. Named still open in
docs/judge.md on 2026-12-05 (the red-team's split, a bound around the call and one inside).

closed by: `row-pick`: a helper's statements sit under the `if`s around its call as well as its own, unless the call
rebases its row on the bound it sits above (`else: helper(pid - units)`, RoPE's k programs), whose row starts at 0.
"""

# pattern: bounds joined across a helper's call: one around it, one inside
# layer: static
# rule: row-pick
# plan: {"family": "row_reduction", "launches": [{"args": ["x", "w", "y", "rows", "cols", "eps"], "constexprs": {"BLOCK": "block_cols"}, "grid": "rows", "kernel": "_rms_kernel", "num_warps": 4}]}

import triton
import triton.language as tl


@triton.jit
def _bump(y, row, n_rows):
    out = y
    if row * 3 > n_rows * 2:
        out = y * 1.5
    return out


@triton.jit
def _rms_kernel(x_ptr, w_ptr, y_ptr, n_rows, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    y = w * (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
    if row * 1024 < n_rows * 683:
        y = _bump(y, row, n_rows)
    tl.store(y_ptr + row * n_cols + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
