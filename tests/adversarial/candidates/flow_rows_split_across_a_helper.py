"""An RMSNorm whose store lives in a helper kernel called under two one-sided ifs (factors of at most 1,024).

why hostile: the caller stores through `_put` when `3 * row <= 2 * n_rows` and again when
`1024 * row >= 683 * n_rows`; each `if` bounds the row from one side, and the helper's store is unbounded (a helper's
rows start unbounded), so the two sides are never joined. Rows strictly between 2n/3 and 683n/1024 (a window n/3072
wide, empty below 1,024 rows) are never written: 43 rows at 131,072, 2 at 6,761 (4,508 and 4,509). The factors stay
within the 32-bit rule's 1,024. Written by a red-team author against the judge of 2026-12-05 and accepted then.

closed by: `row-pick`: a store inside a helper kernel is reached by the rows of the `if`s around the helper's call, so
the two calls' stores to one output are bounded from two sides (the helper's own bounds stay its own: RoPE's k
programs bound their tile inside one).
"""

# pattern: bounds split between a kernel and the helper it calls (small factors)
# layer: static
# rule: row-pick
# plan: {"family": "row_reduction", "launches": [{"args": ["x", "w", "y", "rows", "cols", "eps"], "constexprs": {"BLOCK": "block_cols"}, "grid": "rows", "kernel": "_rms_kernel", "num_warps": 4}]}

import triton
import triton.language as tl


@triton.jit
def _put(y_ptr, row, n_cols, cols, value):
    tl.store(y_ptr + row * n_cols + cols, value, mask=cols < n_cols)


@triton.jit
def _rms_kernel(x_ptr, w_ptr, y_ptr, n_rows, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    y = (w * (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)).to(y_ptr.dtype.element_ty)
    if row * 3 <= n_rows * 2:
        _put(y_ptr, row, n_cols, cols, y)
    if row * 1024 >= n_rows * 683:
        _put(y_ptr, row, n_cols, cols, y)
