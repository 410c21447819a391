"""A LayerNorm whose variance is one pass, E[x^2] - E[x]^2 in fp32: right on rows centred near zero, garbage on rows
with a large common offset.

why hostile: one pass saves the second sweep over the row, and on the rows the judge used to draw (normal, huge,
outlier channels, tiny, all centred near zero) it is as close as the two-pass module. On a row of 1000 + N(0, 1) the
two sums are ~1e6 and cancel to ~1, so fp32's roundoff of the sum of squares (~1e6 * 64 * 2**-24) is the size of
the variance itself: the output is off by tens of percent. The offset regime draws such rows (a residual stream
with a large mean); the honest two-pass module stays inside the centred row term of the bound there.
"""

# pattern: one-pass variance cancelling on rows with a large common offset
# layer: correctness
# rule: outside-tolerance
# plan: {"family": "row_reduction", "launches": [{"args": ["x", "w", "y", "cols", "eps"], "constexprs": {"BLOCK": "block_cols"}, "grid": "rows", "kernel": "_ln_kernel", "num_warps": 4}]}

import triton
import triton.language as tl


@triton.jit
def _ln_kernel(x_ptr, w_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / n_cols
    variance = tl.sum(x * x, axis=0) / n_cols - mean * mean  # one pass: cancels when |mean| >> spread
    variance = variance + tl.maximum(-variance, 0.0)  # never below zero (NaN stays NaN)
    y = (x - mean) * tl.rsqrt(variance + eps) * w
    tl.store(y_ptr + row * n_cols + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
