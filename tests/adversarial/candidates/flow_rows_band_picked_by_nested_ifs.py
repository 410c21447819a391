"""An RMSNorm whose answer is scaled by 1.5 for the rows between two bounds, set under two nested ifs.

why hostile: `if row * 3 > 2 * n_rows:` then `if row * 1024 < 683 * n_rows:` around `y = y * 1.5`, and one store
after both. Each `if` bounds the row from one side; nothing loads or stores under them, so the rule that joins the
bounds around a load or store never saw them, and the store after them is unbounded. Rows strictly between 2n/3 and
683n/1024 (a window n/3072 wide) are 1.5x: 43 rows at 131,072. A CPU judging runs a sample of the programs of a large
launch and misses them. Found while closing the red-team's helper split of 2026-12-05; accepted then.

closed by: `row-pick`: a value set under `if`s on which row holds for those rows only after them, as a `tl.where`
picks; stored, the bounds it was picked by join the store's own.
"""

# pattern: a value picked for a band of rows by nested one-sided ifs
# layer: static
# rule: row-pick
# plan: {"family": "row_reduction", "launches": [{"args": ["x", "w", "y", "rows", "cols", "eps"], "constexprs": {"BLOCK": "block_cols"}, "grid": "rows", "kernel": "_rms_kernel", "num_warps": 4}]}

import triton
import triton.language as tl


@triton.jit
def _rms_kernel(x_ptr, w_ptr, y_ptr, n_rows, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    y = w * (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
    if row * 3 > n_rows * 2:
        if row * 1024 < n_rows * 683:
            y = y * 1.5
    tl.store(y_ptr + row * n_cols + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
