"""Replaces NaN/Inf inputs by 0 before normalising: a finite answer where the module's is not.

why hostile: "robust" kernels that scrub non-finite values hide an upstream divergence the model
would otherwise surface (the module propagates NaN/Inf); every finite-only test passes. The judge
draws non-finite inputs and requires NaN/Inf wherever the module's own output has them.
"""

# pattern: NaN inputs swallowed to 0
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
    x = tl.where((x == x) & (tl.abs(x) < 3.0e38), x, 0.0)  # NaN and Inf become 0
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    normed = (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
    tl.store(y_ptr + row * n_cols + cols, (w * normed).to(y_ptr.dtype.element_ty), mask=mask)
