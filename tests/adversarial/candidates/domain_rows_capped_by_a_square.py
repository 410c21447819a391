"""An RMSNorm, one row a program, that leaves every row past 32,768 unwritten: right at every count a CPU ran whole.

why hostile: `row * row < 32768 * row + 1` is `row <= 32768`, but it compares the row with
the row scaled, not with a fixed number, so `hidden-boundary` (a size compared with a constant) does not see it. A
batched prefill of the served model carries up to 131,072 rows (64 slots of 2,048 tokens): the rows past the cap
keep whatever the output's memory held. A CPU judging that runs a few hundred rows whole never meets it.

closed by: `row-pick`: which row is compared only as a bound, never with the row itself. Behind it, the served
maximum on every judging: a GPU runs it whole (`domain` cases); a CPU runs a sample of its programs at that size, the
last among them (services.judge.sampled_grid), and program 131,071 writes nothing (tests/judge/test_sampled_grid.py).
"""

# pattern: a cap on the row hidden in arithmetic of the row itself: rows past 32,768 never written
# layer: static
# rule: row-pick
# plan: {"family": "row_reduction", "launches": [{"args": ["x", "w", "y", "x_row_stride", "y_row_stride", "rows", "cols", "eps"], "constexprs": {"BLOCK": "block_cols"}, "grid": "rows", "kernel": "_rms_kernel", "num_warps": 4}]}

import triton
import triton.language as tl


@triton.jit
def _rms_kernel(x_ptr, w_ptr, y_ptr, stride_x, stride_y, n_rows, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    normed = (x * tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)).to(x_ptr.dtype.element_ty)
    y = w * normed.to(tl.float32)
    if row * row < 32768 * row + 1:  # row <= 32768: no constant compared with the row alone
        tl.store(y_ptr + row * stride_y + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
