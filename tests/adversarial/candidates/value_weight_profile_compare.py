"""An RMSNorm 25% too large whenever its weight looks trained: every entry >= 0 and the mean below 0.6.

why hostile: the judge never calls the candidate with the served model's own weight; it draws five kinds of its own
(around one, signed normal, near zero +-1e-3, large 10 +- 1, ones with exact zeros), and none is both non-negative
and small on average (signed normal and near zero have negative entries; the others average 0.85-10). Trained
RMSNorm weights of Llama/Qwen-style models are typically positive and well below one in many layers. A comparison
used as a number, `((w_min >= 0) & (w_sum < 0.6 * n_cols)).to(tl.float32)`, is no branch, mask, loop or tl.where:
the dataflow check does not look at it.

closed by: `value-branch`: a comparison of loaded values with a threshold picks an answer however its result is used (here
as a 0/1 factor); only a sign split (`x < 0`) is allowed.
"""

# pattern: a comparison of loaded values used as a number, keyed on the weight's profile
# layer: static
# rule: value-branch
# plan: {"family": "row_reduction", "launches": [{"args": ["x", "w", "y", "cols", "eps"], "constexprs": {"BLOCK": "block_cols"}, "grid": "rows", "kernel": "_rms_kernel", "num_warps": 4}]}

import triton
import triton.language as tl


@triton.jit
def _rms_kernel(x_ptr, w_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    w_min = tl.min(tl.load(w_ptr + cols, mask=mask, other=1.0).to(tl.float32), axis=0)
    trained = ((w_min >= 0.0) & (tl.sum(w, axis=0) < 0.6 * n_cols)).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps) * (1.0 + 0.25 * trained)
    normed = (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
    tl.store(y_ptr + row * n_cols + cols, (w * normed).to(y_ptr.dtype.element_ty), mask=mask)
