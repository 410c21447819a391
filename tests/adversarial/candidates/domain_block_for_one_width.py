"""Right at the width the profile's dominant calls have, wrong at another width the same class is called at.

why hostile: one module class can serve two widths (a norm class of per-head and hidden-size instances); the
judge drew the dominant width and an odd one. A block of 128 columns fixed in the plan covers 64 and 97, and
leaves the columns past 128 of a 256-wide call unwritten.

closed by: the profile records every width the class was called at (ModuleClassProfile.widths) and the judge
draws each (services.judge.cases, `width`).
"""

# pattern: a plan constexpr that fixes the block to one width's; the class is also called at a wider one
# layer: correctness
# rule: nan-output
# plan: {"family": "row_reduction", "launches": [{"args": ["x", "w", "y", "cols", "eps"], "constexprs": {"BLOCK": "128"}, "grid": "rows", "kernel": "_rms_kernel", "num_warps": 4}]}

import triton
import triton.language as tl


@triton.jit
def _rms_kernel(x_ptr, w_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    normed = (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
    tl.store(y_ptr + row * n_cols + cols, (w * normed).to(y_ptr.dtype.element_ty), mask=mask)
