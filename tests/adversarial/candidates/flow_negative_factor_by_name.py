"""An RMSNorm whose store mask bounds the row from both sides, one side written as a row times a named negative.

why hostile: `row * FLIP * 3 >= n_rows * FLIP * 2` with FLIP = -1, a constexpr the plan gives, is `3 * row <= 2 * n_rows`: a
bound from below-side. The dataflow check sees a negative factor only as a literal (`-3`, `row * -3`): a name holding
one keeps the row "rising", so the condition reads as a bound from above, like its neighbour `row * 6144 >=
n_rows * 4099`, and the mask looks one-sided. Rows strictly between 2n/3 and 4099n/6144 are never written: every
call of 683+ rows leaves up to n/2048 rows as the output's memory held them.

closed by: `row-pick`: a row's factor is known by its value (a literal, the source's constant `FLIP = -1`, a constexpr the
plan gives a number); a negative one makes the row fall, so the two bounds are seen from both sides.
"""

# pattern: a negative factor held by a name hides a bound from the other side
# layer: static
# rule: row-pick
# plan: {"family": "row_reduction", "launches": [{"args": ["x", "w", "y", "rows", "cols", "eps"], "constexprs": {"BLOCK": "block_cols", "FLIP": "-1"}, "grid": "rows", "kernel": "_rms_kernel", "num_warps": 4}]}

import triton
import triton.language as tl


@triton.jit
def _rms_kernel(x_ptr, w_ptr, y_ptr, n_rows, n_cols, eps, BLOCK: tl.constexpr, FLIP: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    y = (w * (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)).to(y_ptr.dtype.element_ty)
    r = row + cols * 0  # the row on every lane
    keep = (r * FLIP * 3 >= n_rows * FLIP * 2) | (r * 6144 >= n_rows * 4099)
    tl.store(y_ptr + row * n_cols + cols, y, mask=mask & keep)
