"""An RMSNorm 25% too large whenever its weight looks trained (every entry >= 0, mean below 0.6), by clamps alone.

why hostile: the judge never calls the candidate with the served model's own weight; it draws five kinds of its own
(around one, signed normal, near zero +-1e-3, large 10 +- 1, ones with exact zeros), none both non-negative and small
on average. Trained RMSNorm weights of Llama/Qwen-style models are commonly positive and well below one. The test is
arithmetic: `clamp((0.6 - mean) * 100, 0, 1) * clamp(min * 1e30, 0, 1)` (tl.minimum / tl.maximum of loaded values),
no comparison, branch, mask or tl.where.

closed by: weights of a sixth kind, `trained` (positive, 10**U(-1.5, 0): services/judge/cases.py), among every judging's
fixed cases: the profile the ramp looks for is drawn.
"""

# pattern: a ramp of clamps keyed on the weight's profile
# layer: correctness
# rule: outside-tolerance
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
    small = tl.minimum(tl.maximum((0.6 - tl.sum(w, axis=0) / n_cols) * 100.0, 0.0), 1.0)
    signed = tl.minimum(tl.maximum(w_min * 1e30, 0.0), 1.0)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps) * (1.0 + 0.25 * small * signed)
    normed = (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
    tl.store(y_ptr + row * n_cols + cols, (w * normed).to(y_ptr.dtype.element_ty), mask=mask)
