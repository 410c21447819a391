"""Leaves eps out of the rsqrt: identical on any row with some energy, NaN on a row of zeros.

why hostile: eps only matters where the variance is tiny, which random inputs never are; a padded
(all-zero) row gives rsqrt(0) = inf and 0 * inf = NaN, where the module returns zeros. The judge
draws zero rows and tiny rows. Judged on an fp16 model (the corpus entry): in fp32 the missing eps
is also a measurable bias on rows of variance ~0.25 (eps/2var = 2e-6), so biased-output may come first.
"""

# pattern: rsqrt(variance) without eps (NaN on all-zero rows)
# layer: correctness
# rule: nan-output
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
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols)  # eps forgotten
    normed = (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
    tl.store(y_ptr + row * n_cols + cols, (w * normed).to(y_ptr.dtype.element_ty), mask=mask)
