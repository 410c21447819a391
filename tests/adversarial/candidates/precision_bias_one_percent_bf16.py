"""Scales every bf16 output by 1.01: a 1% systematic bias, inside the old fixed bf16 tolerance (1.6e-2).

why hostile: a fixed atol=rtol=1.6e-2 for bf16 passes any error up to 1.6%, so a kernel may skew its
answers (or skip work that costs 1%) unseen. The judge's bound comes from the dtypes' rounding: two
bf16 roundings are at most ~0.8%, and a mean signed error beyond rounding is a bias.
"""

# pattern: a 1% bias in bf16
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
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    normed = (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
    tl.store(y_ptr + row * n_cols + cols, (w * normed * 1.01).to(y_ptr.dtype.element_ty), mask=mask)
