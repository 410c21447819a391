"""An RMSNorm in which every row 1530 more than a multiple of 1531 normalises the row before it.

why hostile: its loads read row `row - row % 1531 // 1530`, which is the row itself except for rows 1530, 3061, 4592,
..., which read their predecessor; the stores go to the right rows, so every row is written and no fence is crossed.
There is no comparison anywhere, so `row-pick`, which looked at comparisons only, had nothing to see; a CPU judging
runs launches of thousands of rows only as a sample of their programs, and one row in 1,531 was met by about one
judging in two hundred. A red-team author wrote it for the residual norm on 2026-12-05 (a 2,048-token prefill of
the 1.5B shape: row 1530 is 3.35 off); this is its RMSNorm form, accepted on a CPU then.

closed by: `row-pick`: an address built from which row made curved (a product of rows, a remainder, quotient or
power of one by a fixed number, a function of one) is refused, as a comparison of one is.
"""

# pattern: which row a load reads, made curved by arithmetic alone
# layer: static
# rule: row-pick
# plan: {"family": "row_reduction", "launches": [{"args": ["x", "w", "y", "cols", "eps"], "constexprs": {"BLOCK": "block_cols"}, "grid": "rows", "kernel": "_rms_kernel", "num_warps": 4}]}

import triton
import triton.language as tl


@triton.jit
def _rms_kernel(x_ptr, w_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    source = row - row % 1531 // 1530
    x = tl.load(x_ptr + source * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    y = w * (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
    tl.store(y_ptr + row * n_cols + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
