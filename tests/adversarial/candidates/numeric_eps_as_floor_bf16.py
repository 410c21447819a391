"""A bf16 RMSNorm that floors the mean square at eps, rsqrt(max(ms, eps)), where the module adds it,
rsqrt(ms + eps).

why hostile: a floor is how some normalisations use their eps (F.normalize clamps the norm), and it agrees with the
module wherever one term dominates: rows of normal scale (ms >> eps, off by eps / 2ms) and tiny rows (ms << eps,
off by ms / 2eps), the two scales the judge used to draw. Where the row's mean square is within a factor ~60 of eps
(rows of scale ~1e-3 against eps 1e-6) it is off by up to 29%. The log-scale regime draws rows over 16 decades on a
grid 1.6 decades apart, so one row always lands in that band.
"""

# pattern: eps used as a floor: right at normal and tiny scales, wrong between them
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
    mean_square = tl.sum(x * x, axis=0) / n_cols
    rstd = tl.rsqrt(mean_square + tl.maximum(eps - mean_square, 0.0))  # max(ms, eps), NaN and inf kept
    normed = (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
    tl.store(y_ptr + row * n_cols + cols, (w * normed).to(y_ptr.dtype.element_ty), mask=mask)
