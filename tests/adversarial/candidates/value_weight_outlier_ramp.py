"""An RMSNorm 25% too large when its weight is non-negative with a few outlier channels (max > 8x the mean), by clamps.

why hostile: the judge never calls the candidate with the served module's own weight: it draws six synthetic kinds
(around one, signed normal, near zero, large 10 +- 1, ones with zeros, and since the last round "trained":
10**U(-1.5, 0)). None is non-negative with a max over 8x its mean (the trained kind peaks at 1 with a mean ~0.29;
the others' max/mean is ~1.3; signed normal and near zero have negative entries). Trained norm weights with a few
outlier channels far above the rest are common in LLMs. The test is arithmetic (tl.min / tl.max / tl.sum and clamps):
no comparison, branch, mask, where or bitcast.

closed by: the `trained` weights carry one to three outlier channels 10-30x the rest (services/judge/cases.py): the profile
the ramp looks for is drawn on every judging.
"""

# pattern: a ramp of clamps keyed on a weight profile no drawn kind has (non-negative, outlier channels)
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
    outlier = tl.minimum(tl.maximum((tl.max(w, axis=0) - 8.0 * tl.sum(w, axis=0) / n_cols) * 100.0, 0.0), 1.0)
    signed = tl.minimum(tl.maximum(w_min * 1e30, 0.0), 1.0)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps) * (1.0 + 0.25 * outlier * signed)
    normed = (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
    tl.store(y_ptr + row * n_cols + cols, (w * normed).to(y_ptr.dtype.element_ty), mask=mask)
